"""Read planning, on the driver: which entries of which ledgers a batch read returns.

The plan is fixed here, once: closed ledgers are read up to their last entry, open ones up to
the LAC a quorum of their bookies reports now (never past it), so a read that runs while a
producer appends returns a consistent prefix of the log. Each (ledger, fragment) range becomes
one or more LedgerRange values of at most `max_entries_per_partition` entries, carrying the
ledger's metadata (which pickles) so executors need no metadata reads to find the replicas.

No pyspark here; source.py wraps ranges into Spark input partitions.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from metadata import LedgerId, LedgerMetadata, MetadataError, NoSuchLedgerError
from metadata.log_record import LogLedger, LogRecord
from metadata.log_segments import LogHead
from metadata.logs import NoSuchLogError
from pyspark_ledger.datasource.options import Bound, LedgerSourceOptions, OptionError
from pyspark_ledger.datasource.worker_gc import freeze_worker_heap
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.ledger.read_handle import ReadHandle

if TYPE_CHECKING:
    from pyspark_ledger.client import LedgerClient

log = logging.getLogger(__name__)

# A plan names every range in the driver's memory and in Spark's task list: keep it bounded.
PARTITIONS_MAX = 100_000


class LedgerSourceError(LedgerError):
    """Reading or writing through the data source is impossible as asked (no such log, wrong
    password, incompatible schema, ...). The message says what to change."""


@dataclass(frozen=True, slots=True)
class LedgerRange:
    """Entries first..last (inclusive) of one fragment of one ledger."""

    index: int  # position in the plan (spreads first-replica choice over the ensemble)
    seq: int  # the ledger's sequence number in its log (0 for a single-ledger read)
    ledger_id: LedgerId
    first_entry_id: int
    last_entry_id: int
    ensemble: tuple[str, ...]  # the fragment's bookies
    metadata: LedgerMetadata
    metadata_version: int

    @property
    def entries(self) -> int:
        return self.last_entry_id - self.first_entry_id + 1


@dataclass(frozen=True, slots=True)
class SourceShape:
    """What a read returns: the payload format and, for Arrow logs, the written columns' Spark
    schema as JSON (None for raw, or for a single Arrow ledger whose schema comes from entry 0)."""

    payload_format: str
    schema_json: str | None


def read_log_head(client: LedgerClient, opts: LedgerSourceOptions) -> LogHead:
    """The log's head: one read however long the log (its sealed ledgers stay in segments,
    fetched by log_ledgers only for the positions a plan covers)."""
    name = opts.require_log("reading")
    try:
        return client.logs.read_head(name)[0]
    except NoSuchLogError:
        raise LedgerSourceError(f"no log named {name!r} in {opts.metadata_uri} (option log)") from None


def read_log(client: LedgerClient, opts: LedgerSourceOptions) -> LogRecord:
    """The head view: the log's fields (format, schema, next_seq, trim point) and its tail."""
    return read_log_head(client, opts).record


def log_ledgers(client: LedgerClient, head: LogHead, from_seq: int = 0) -> Iterator[LogLedger]:
    """The log's ledgers from `from_seq` on, in order, each segment fetched only when reached."""
    return client.logs.iter_ledgers(head.record.name, head, from_seq)


def first_ledger(client: LedgerClient, head: LogHead, from_seq: int = 0) -> LogLedger | None:
    return next(log_ledgers(client, head, from_seq), None)


def shape_of(client: LedgerClient, opts: LedgerSourceOptions) -> SourceShape:
    """The payload format (an explicit payloadFormat wins; else what the log recorded) and schema."""
    if opts.log is None:
        return SourceShape(opts.payload_format or "raw", None)
    rec = read_log(client, opts)
    fmt = opts.payload_format or rec.payload_format
    if fmt == "arrow" and rec.payload_format != "arrow":
        raise LedgerSourceError(f"log {rec.name!r} holds raw entries, not Arrow (option payloadFormat)")
    if fmt == "arrow" and rec.schema is None:
        raise LedgerSourceError(f"Arrow log {rec.name!r} has no recorded schema yet (nothing was written)")
    return SourceShape(fmt, rec.schema if fmt == "arrow" else None)


def last_readable(client: LedgerClient, meta: LedgerMetadata, version: int, opts: LedgerSourceOptions) -> int:
    if meta.is_closed:
        return meta.last_entry_id  # type: ignore[return-value]  # closed: it has an end
    handle = ReadHandle(client.context, meta, version, opts.password)
    try:
        return handle.last_add_confirmed()
    finally:
        handle.close()


def _check_position(client: LedgerClient, head: LogHead | None, option: str, bound: Bound) -> None:
    p = bound.position
    if p is None or head is None:
        return
    found = first_ledger(client, head, p.seq)  # the one segment (or the tail) holding p.seq
    at = found.ledger_id if found is not None and found.seq == p.seq else None
    if at is not None and at != p.ledger_id:
        raise OptionError(option, f"position {p} names ledger {p.ledger_id}, but seq {p.seq} of this log is ledger {at}")


def plan_ranges(client: LedgerClient, opts: LedgerSourceOptions) -> list[LedgerRange]:
    """The ranges a batch read covers, in log order. Of a log, only the segments covering the
    range asked for are fetched."""
    start, end = opts.starting.position, opts.ending.position
    head: LogHead | None = None
    ledgers: Iterator[tuple[int, LedgerId]]
    if opts.log is not None:
        head = read_log_head(client, opts)
        ledgers = ((lg.seq, lg.ledger_id) for lg in log_ledgers(client, head, 0 if start is None else start.seq))
    elif opts.ledger is not None:
        ledgers = iter([(0, opts.ledger)])
    else:
        raise OptionError("log", "give exactly one of log and ledger")
    if opts.starting.kind == "latest" or opts.ending.kind == "earliest":
        return []  # a batch read that starts after the end (or ends before the start) is empty
    _check_position(client, head, "startingPosition", opts.starting)
    _check_position(client, head, "endingPosition", opts.ending)
    ranges: list[LedgerRange] = []
    for seq, lid in ledgers:
        if start is not None and seq < start.seq:
            continue
        if end is not None and seq > end.seq:
            break
        try:
            meta, version = client.ledgers.read(lid)
        except NoSuchLedgerError:
            if opts.ledger is not None:
                raise LedgerSourceError(f"no ledger {lid} in {opts.metadata_uri} (option ledger)") from None
            log.info("ledger of the log is gone (trimmed while planning), skipping log=%s ledger=%s", opts.log, lid)
            continue
        if not meta.check_password(opts.password):
            raise OptionError("password", f"wrong password for ledger {lid} of {opts.target}")
        first = start.entry_id if start is not None and seq == start.seq else 0
        last = last_readable(client, meta, version, opts)
        if end is not None and seq == end.seq:
            last = min(last, end.entry_id)
        if last < first:
            continue
        add_fragment_ranges(ranges, seq, lid, meta, version, first, last, opts.max_entries_per_partition,
                            limit=PARTITIONS_MAX)
    log.info("read planned target=%s ranges=%d entries=%d", opts.target, len(ranges), sum(r.entries for r in ranges))
    return ranges


def add_fragment_ranges(ranges: list[LedgerRange], seq: int, lid: LedgerId, meta: LedgerMetadata, version: int,
                        first: int, last: int, max_entries: int, *, limit: int | None = None) -> None:
    """Append the ranges covering entries first..last of one ledger: one per fragment (its own
    ensemble), each split to at most `max_entries` entries. More than `limit` ranges in all is
    an OptionError naming maxEntriesPerPartition."""
    for seg_index, seg in enumerate(meta.segments):
        seg_last = meta.segment_last_entry_id(seg_index)
        lo = max(first, seg.first_entry_id)
        hi = last if seg_last is None else min(last, seg_last)
        while lo <= hi:
            top = min(hi, lo + max_entries - 1)
            ranges.append(LedgerRange(len(ranges), seq, lid, lo, top, seg.bookies, meta, version))
            if limit is not None and len(ranges) > limit:
                raise OptionError("maxEntriesPerPartition", f"the read would need more than {limit} partitions; raise it")
            lo = top + 1


def open_client(opts: LedgerSourceOptions, *, add_timeout_s: float = 10.0) -> LedgerClient:
    """A client for this job's metadata service; an unreachable store fails within its connect
    timeout with a message naming the option. Every piece of the data source that runs in a Spark
    Python worker (planning, reads, writes, commits) starts here, so this is also where a reused
    worker freezes what its imports made (worker_gc)."""
    from pyspark_ledger.client import LedgerClient

    freeze_worker_heap()

    try:
        return LedgerClient(opts.metadata_uri, add_timeout_s=add_timeout_s)
    except MetadataError as exc:
        raise LedgerSourceError(
            f"cannot open the metadata service {opts.metadata_uri} (option metadataServiceUri): {exc}") from exc
