"""The record of a named log: an ordered list of ledgers plus what the writer and Spark need.

Stored at /logs/<name> as a checksummed, versioned envelope around JSON (readable with the admin
shell, evolvable by adding fields). Every change is a compare-and-set on its version (metadata.logs).

    magic b"PLOG" | format version u16 | reserved u16 | body length u32 | CRC32C(body) u32 | JSON body
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field, replace
from typing import Any

import crc32c

from metadata.context import now_ms
from metadata.errors import CorruptMetadataError, InvalidMetadataError, UnsupportedFormatVersionError
from metadata.ids import LedgerId

LOG_FORMAT_VERSION = 1
_MAGIC = b"PLOG"
_HEADER = struct.Struct(">4sHHII")
# Bounds: the stored head holds only a bounded tail (metadata.log_segments); the rest lives in
# immutable segment records, so this caps only the in-memory view of one log.
LOG_LEDGERS_MAX = 2_000_000
COMMITTED_BATCH_KEYS_MAX = 1_000
# How the log's entries hold messages (docs/entry-format.md): "single" = one message per entry
# (entry format 2, every release reads it); "batched" = entries may be message batches (entry
# format 3, read by releases with batched messages). A record without the field is "single".
# A client meeting a format it does not know refuses the log by name instead of guessing.
MESSAGE_FORMAT_SINGLE = "single"
MESSAGE_FORMAT_BATCHED = "batched"
MESSAGE_FORMATS = (MESSAGE_FORMAT_SINGLE, MESSAGE_FORMAT_BATCHED)
MESSAGE_FORMAT_PROPERTY = "setting.message_format"  # the copy in `properties` (see with_message_format)
# The keys this release reads; any other top-level key is kept in LogRecord.extra.
RECORD_KEYS = frozenset({"name", "formatVersion", "writerEpoch", "nextSeq", "ctimeMs", "schema", "payloadFormat",
                         "messageFormat", "ledgers", "committedBatches", "pendingDeletions", "retention",
                         "properties", "trimSeq"})
_LEDGER_KEYS = frozenset({"seq", "ledger", "ctimeMs", "entryCount", "sizeBytes", "sealedMs", "appendMsMin",
                          "appendMsMax"})
_RETENTION_KEYS = frozenset({"max_age_ms", "max_size_bytes"})


@dataclass(frozen=True, slots=True)
class LogLedger:
    """One ledger of a log. `seq` increases along the log and is never reused, so a position
    (seq, entry id) orders entries across ledgers and survives trimming."""

    seq: int
    ledger_id: LedgerId
    ctime_ms: int  # when the ledger joined the log
    entry_count: int | None = None  # known once the ledger is closed
    size_bytes: int | None = None
    # When the ledger was sealed into the log (None: sealed by a release before this field, or
    # open). Retention judges age by it, not by ctime_ms: a ledger that joined long ago but took
    # entries until a minute ago is a minute old.
    sealed_ms: int | None = None
    extra: tuple[tuple[str, str], ...] = ()  # keys a newer release wrote: (key, JSON), kept as they are
    # The earliest and latest append time (ms) its entries carry (Arrow entries' and message
    # batches' own times, docs/entry-format.md), as its writer knew them when the ledger joined or
    # was sealed into the log; None: not known (a ledger without times of its own, one sealed by a
    # takeover's recovery or by a release before the fields, or still open). Filter pushdown
    # prunes ledgers by them (pyspark_ledger/datasource/read/pushdown.py): never narrower than the
    # times its entries hold.
    append_times_ms: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        times = self.append_times_ms
        if times is not None and not 0 <= times[0] <= times[1]:
            raise InvalidMetadataError(f"ledger {self.ledger_id}: append times {times} are not a range of times")

    @property
    def sealed(self) -> bool:
        return self.entry_count is not None


def widened_times(times: tuple[int, int] | None, append_ms: int) -> tuple[int, int]:
    """A ledger's append times (LogLedger.append_times_ms) with one more entry's time: what a
    writer keeps as it stamps entries."""
    return (append_ms, append_ms) if times is None else (min(times[0], append_ms), max(times[1], append_ms))


@dataclass(frozen=True, slots=True)
class Retention:
    max_age_ms: int | None = None
    max_size_bytes: int | None = None
    extra: tuple[tuple[str, str], ...] = ()  # retention keys a newer release wrote: kept, not refused


@dataclass(frozen=True, slots=True)
class LogRecord:
    name: str
    ledgers: tuple[LogLedger, ...] = ()
    writer_epoch: int = 0
    next_seq: int = 0
    schema: str | None = None  # the Spark schema of what was written (JSON), if any
    payload_format: str = "raw"  # "raw" (one row = one entry) or "arrow"
    committed_batches: tuple[tuple[str, int], ...] = ()  # (writer/query id, last committed batch id)
    pending_deletions: tuple[LedgerId, ...] = ()
    retention: Retention = field(default_factory=Retention)
    properties: tuple[tuple[str, str], ...] = ()
    ctime_ms: int = field(default_factory=now_ms)
    format_version: int = LOG_FORMAT_VERSION
    # Every seq below this was trimmed. A head view (metadata.logs.LogManager.update_head) holds
    # only the tail's ledgers, so a trim of sealed segments is said here, not by a ledger list.
    trim_seq: int = 0
    message_format: str = MESSAGE_FORMAT_SINGLE  # kept as stored, even if unknown (see MESSAGE_FORMATS)
    # Top-level keys this release does not know (a newer one wrote them): (key, JSON), written back
    # unchanged by every compare-and-set, so a mixed fleet never erases a newer field.
    extra: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if len(self.ledgers) > LOG_LEDGERS_MAX:
            raise InvalidMetadataError(f"log {self.name}: more than {LOG_LEDGERS_MAX} ledgers; trim it")
        seqs = [lg.seq for lg in self.ledgers]
        if seqs != sorted(set(seqs)) or (seqs and seqs[-1] >= self.next_seq):
            raise InvalidMetadataError(f"log {self.name}: ledger sequence numbers must increase and be < next_seq")
        if not 0 <= self.trim_seq <= self.next_seq or (seqs and seqs[0] < self.trim_seq):
            raise InvalidMetadataError(f"log {self.name}: trim point {self.trim_seq} outside the log")
        if len(self.committed_batches) > COMMITTED_BATCH_KEYS_MAX:
            raise InvalidMetadataError(f"log {self.name}: too many committed batch keys")

    # ---- queries ------------------------------------------------------------------------------

    @property
    def last(self) -> LogLedger | None:
        return self.ledgers[-1] if self.ledgers else None

    def index_of(self, ledger_id: LedgerId) -> int | None:
        for i, lg in enumerate(self.ledgers):
            if lg.ledger_id == ledger_id:
                return i
        return None

    def by_seq(self, seq: int) -> LogLedger | None:
        for lg in self.ledgers:
            if lg.seq == seq:
                return lg
        return None

    def committed_batch(self, writer_id: str) -> int | None:
        for key, batch in self.committed_batches:
            if key == writer_id:
                return batch
        return None

    @property
    def size_bytes(self) -> int:
        return sum(lg.size_bytes or 0 for lg in self.ledgers)

    # ---- changes (each returns a new record) --------------------------------------------------

    def with_epoch(self, epoch: int) -> LogRecord:
        if epoch <= self.writer_epoch:
            raise InvalidMetadataError(f"log {self.name}: writer epoch must increase ({self.writer_epoch} -> {epoch})")
        return replace(self, writer_epoch=epoch)

    def with_ledger(self, ledger_id: LedgerId, ctime_ms: int | None = None) -> LogRecord:
        lg = LogLedger(self.next_seq, ledger_id, now_ms() if ctime_ms is None else ctime_ms)
        return replace(self, ledgers=self.ledgers + (lg,), next_seq=self.next_seq + 1)

    def with_ledgers_appended(self, ledger_ids: list[LedgerId], sizes: list[tuple[int, int]],
                              times: list[tuple[int, int] | None] | None = None) -> LogRecord:
        """Append sealed ledgers (a Spark job's output) in one change, all with the one time of that
        change: their rows became readable together, and a read from a time must not split them.
        `times`: each ledger's append times (LogLedger.append_times_ms), when its writer knew them."""
        joined_ms = now_ms()
        each = times if times is not None else [None] * len(ledger_ids)
        if not len(ledger_ids) == len(sizes) == len(each):
            raise InvalidMetadataError(f"log {self.name}: {len(ledger_ids)} ledgers, {len(sizes)} sizes and "
                                       f"{len(each)} time ranges appended")
        appended = tuple(LogLedger(self.next_seq + i, lid, joined_ms, entries, size, joined_ms, append_times_ms=t)
                         for i, (lid, (entries, size), t) in enumerate(zip(ledger_ids, sizes, each)))
        return replace(self, ledgers=self.ledgers + appended, next_seq=self.next_seq + len(appended))

    def with_sealed(self, ledger_id: LedgerId, entry_count: int, size_bytes: int,
                    sealed_ms: int | None = None, append_times_ms: tuple[int, int] | None = None) -> LogRecord:
        """`append_times_ms`: the append times its entries carry, when the sealer knows them (its
        writer); a ledger sealed before keeps what it has."""
        i = self.index_of(ledger_id)
        if i is None:
            return self
        ledgers = list(self.ledgers)
        at = now_ms() if sealed_ms is None else sealed_ms
        old = ledgers[i]
        ledgers[i] = replace(old, entry_count=entry_count, size_bytes=size_bytes,
                             sealed_ms=old.sealed_ms if old.sealed else at,
                             append_times_ms=old.append_times_ms if old.sealed else append_times_ms)
        return replace(self, ledgers=tuple(ledgers))

    def without_ledgers(self, ledger_ids: set[LedgerId]) -> LogRecord:
        """Drop ledgers from the list and record them as pending deletions (one change)."""
        kept = tuple(lg for lg in self.ledgers if lg.ledger_id not in ledger_ids)
        removed = tuple(lg.ledger_id for lg in self.ledgers if lg.ledger_id in ledger_ids)
        pending = self.pending_deletions + tuple(x for x in removed if x not in self.pending_deletions)
        return replace(self, ledgers=kept, pending_deletions=pending)

    def trimmed_to(self, seq: int) -> LogRecord:
        """Trim every ledger with seq < `seq` (at most next_seq): the ones this view holds become
        pending deletions; in a head view the sealed segments below go with the commit and their
        ledgers are deleted from the segments themselves (metadata.log_trim)."""
        seq = min(seq, self.next_seq)
        if seq <= self.trim_seq:
            return self
        gone = {lg.ledger_id for lg in self.ledgers if lg.seq < seq}
        return replace(self.without_ledgers(gone), trim_seq=seq)

    def without_pending(self, ledger_ids: set[LedgerId]) -> LogRecord:
        return replace(self, pending_deletions=tuple(x for x in self.pending_deletions if x not in ledger_ids))

    def with_committed_batch(self, writer_id: str, batch_id: int) -> LogRecord:
        others = tuple((k, b) for k, b in self.committed_batches if k != writer_id)
        return replace(self, committed_batches=others + ((writer_id, batch_id),))

    def with_schema(self, schema: str | None, payload_format: str) -> LogRecord:
        return replace(self, schema=schema, payload_format=payload_format)

    def with_retention(self, retention: Retention) -> LogRecord:
        return replace(self, retention=retention)

    def with_message_format(self, message_format: str) -> LogRecord:
        """Name how entries hold messages from now on. "batched" never goes back to "single":
        the log's older entries may be batches."""
        if message_format not in MESSAGE_FORMATS:
            raise InvalidMetadataError(f"log {self.name}: message format {message_format!r} not one of {MESSAGE_FORMATS}")
        if self.message_format == MESSAGE_FORMAT_BATCHED or self.message_format == message_format:
            return self
        # Said twice: a release before the field keeps `properties` through its compare-and-set
        # but drops the top-level key; either one saying "batched" makes the log batched.
        props = tuple(sorted(dict(self.properties, **{MESSAGE_FORMAT_PROPERTY: message_format}).items()))
        return replace(self, message_format=message_format, properties=props)


def _unknown(d: dict[str, Any], known: frozenset[str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, json.dumps(v, sort_keys=True)) for k, v in d.items() if k not in known))


def _with_unknown(d: dict[str, Any], extra: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    for key, value in extra:
        d.setdefault(key, json.loads(value))
    return d


def ledger_to_json(lg: LogLedger) -> dict[str, Any]:
    d: dict[str, Any] = {"seq": lg.seq, "ledger": lg.ledger_id.qualified_name, "ctimeMs": lg.ctime_ms,
                         "entryCount": lg.entry_count, "sizeBytes": lg.size_bytes}
    if lg.sealed_ms is not None:
        d["sealedMs"] = lg.sealed_ms
    if lg.append_times_ms is not None:  # optional keys: a release before them keeps them (extra)
        d["appendMsMin"], d["appendMsMax"] = lg.append_times_ms
    return _with_unknown(d, lg.extra) if lg.extra else d


def ledger_from_json(x: dict[str, Any]) -> LogLedger:
    sealed = x.get("sealedMs")
    extra = () if x.keys() <= _LEDGER_KEYS else _unknown(x, _LEDGER_KEYS)  # the common case builds nothing
    lo, hi = x.get("appendMsMin"), x.get("appendMsMax")
    times = None if lo is None or hi is None else (int(lo), int(hi))  # both or neither is ever written
    return LogLedger(int(x["seq"]), LedgerId.from_qualified_name(x["ledger"]), int(x["ctimeMs"]),
                     x.get("entryCount"), x.get("sizeBytes"), None if sealed is None else int(sealed), extra, times)


def retention_to_json(r: Retention) -> dict[str, Any]:
    return _with_unknown({"max_age_ms": r.max_age_ms, "max_size_bytes": r.max_size_bytes}, r.extra)


def retention_from_json(d: dict[str, Any]) -> Retention:
    age, size = d.get("max_age_ms"), d.get("max_size_bytes")
    return Retention(None if age is None else int(age), None if size is None else int(size),
                     _unknown(d, _RETENTION_KEYS))


def to_json_dict(rec: LogRecord) -> dict[str, Any]:
    d = {
        "name": rec.name,
        "formatVersion": rec.format_version,
        "writerEpoch": rec.writer_epoch,
        "nextSeq": rec.next_seq,
        "ctimeMs": rec.ctime_ms,
        "schema": rec.schema,
        "payloadFormat": rec.payload_format,
        "messageFormat": rec.message_format,
        "ledgers": [ledger_to_json(lg) for lg in rec.ledgers],
        "committedBatches": [{"writer": k, "batch": b} for k, b in rec.committed_batches],
        "pendingDeletions": [x.qualified_name for x in rec.pending_deletions],
        "retention": retention_to_json(rec.retention),
        "properties": dict(rec.properties),
    }
    return _with_unknown(d, rec.extra)


def _message_format(d: dict[str, Any]) -> str:
    stored = str(d.get("messageFormat", MESSAGE_FORMAT_SINGLE))
    if stored == MESSAGE_FORMAT_SINGLE and d.get("properties", {}).get(MESSAGE_FORMAT_PROPERTY) == MESSAGE_FORMAT_BATCHED:
        return MESSAGE_FORMAT_BATCHED  # a release before the field rewrote the record
    return stored  # a format this release does not know stays what it is: readers refuse it by name


def from_json_dict(d: dict[str, Any], reserved: frozenset[str] = frozenset()) -> LogRecord:
    """`reserved`: keys the caller reads itself (a head's segment fields), not kept as unknown."""
    return LogRecord(
        name=d["name"],
        ledgers=tuple(ledger_from_json(x) for x in d["ledgers"]),
        writer_epoch=int(d["writerEpoch"]),
        next_seq=int(d["nextSeq"]),
        schema=d.get("schema"),
        payload_format=d.get("payloadFormat", "raw"),
        committed_batches=tuple((x["writer"], int(x["batch"])) for x in d.get("committedBatches", [])),
        pending_deletions=tuple(LedgerId.from_qualified_name(x) for x in d.get("pendingDeletions", [])),
        retention=retention_from_json(d.get("retention", {})),
        properties=tuple(sorted(d.get("properties", {}).items())),
        ctime_ms=int(d.get("ctimeMs", 0)),
        format_version=int(d.get("formatVersion", LOG_FORMAT_VERSION)),
        trim_seq=int(d.get("trimSeq", 0)),
        message_format=_message_format(d),
        extra=_unknown(d, RECORD_KEYS | reserved),
    )


def envelope(magic: bytes, version: int, body_obj: dict[str, Any]) -> bytes:
    """A stored log value: header (magic, version, length, crc32c of the body) + JSON body."""
    body = json.dumps(body_obj, sort_keys=True, separators=(",", ":")).encode()
    return _HEADER.pack(magic, version, 0, len(body), crc32c.crc32c(body)) + body


def open_envelope(data: bytes, magic_wanted: bytes, version_max: int, where: str) -> tuple[int, bytes]:
    """(version, body) of a value `envelope` made; a clear error naming `where` otherwise."""
    if len(data) < _HEADER.size:
        raise CorruptMetadataError(f"{where}: stored record is truncated")
    magic, version, reserved, length, checksum = _HEADER.unpack_from(data)
    if magic != magic_wanted or reserved != 0:
        raise CorruptMetadataError(f"{where}: stored record has a bad header")
    if version > version_max:
        raise UnsupportedFormatVersionError(f"{where}: record format {version} is newer than supported ({version_max})")
    body = data[_HEADER.size:]
    if len(body) != length or crc32c.crc32c(body) != checksum:
        raise CorruptMetadataError(f"{where}: stored record is truncated or corrupt")
    return version, body


def encode(rec: LogRecord) -> bytes:
    return envelope(_MAGIC, LOG_FORMAT_VERSION, to_json_dict(rec))


def decode(data: bytes, name: str) -> LogRecord:
    where = f"log {name!r}"
    _, body = open_envelope(data, _MAGIC, LOG_FORMAT_VERSION, where)
    try:
        return from_json_dict(json.loads(body))
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptMetadataError(f"{where}: stored record is invalid: {exc}") from exc
