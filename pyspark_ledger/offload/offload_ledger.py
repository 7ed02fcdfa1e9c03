"""Offload one sealed ledger: announce, write, verify, record (docs/tiered-storage.md, "Steps").

    1 queue    /offload/files/<attempt> lists the object names (metadata.offload_queue)
    2 announce the ledger's record says WRITING <attempt> (a compare-and-set)
    3 write    the Parquet file (one object, a name unique to the attempt)
    4 verify   read it back from the store: its checksum, and every rebuilt entry decodes to the
               very messages (payload, key, times, headers, position) the bookies returned
    5 record   OFFLOADED <attempt> with sizes and checksums, by one compare-and-set that holds only
               if the record still names this attempt: of two offloaders (a leader change) at
               most one wins; the loser's objects stay queued and the queue pass deletes them.

A crash (kill -9) between any two steps leaves the ledger readable from its bookies (nothing
deletes their copies before step 5) and every object it wrote listed in the queue.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import crc32c
import pyarrow as pa

from metadata.errors import MetadataError
from metadata.ids import LedgerId
from metadata.ledger import DigestType, LedgerMetadata
from metadata.offload_queue import QueuedAttempt, attempt_path, enqueue
from metadata.offload_record import WRITING, OffloadedFile, OffloadRecord, offload_record, with_record
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.log.messages import messages
from pyspark_ledger.offload import layout
from pyspark_ledger.offload.errors import OffloadedFileError, OffloadRefusedError
from pyspark_ledger.offload.parquet_files import LedgerFile, write_ledger_file
from pyspark_ledger.offload.store import ObjectStore
from pyspark_ledger.protocol.arrow_times import append_ms_of
from pyspark_ledger.protocol.entry_format import Entry
from pyspark_ledger.protocol.invariants import ensure

log = logging.getLogger(__name__)

# An attempt still WRITING after this long is taken to be dead: a new attempt may replace it (the
# old one then cannot record: its compare-and-set needs its own WRITING record).
ATTEMPT_STALE_MS = 10 * 60 * 1000
# A ledger is read whole into memory, written as one file and read back: bigger ones are refused
# (a LogWriter's rollover_max_bytes keeps ledgers far below this by default).
OFFLOAD_LEDGER_BYTES_MAX = 1 << 30
STEPS = ("queued", "announced", "written", "verified", "recorded")
Step = Callable[[str], None]  # called after each step (tests kill the process there)


@dataclass(frozen=True)
class LedgerInLog:
    """A sealed ledger of a log, as the offloader sees it."""

    log: str
    log_ctime_ms: int  # the log instance (layout.py)
    payload_format: str
    seq: int
    ledger_id: LedgerId
    joined_ms: int


def _now_ms() -> int:
    return int(time.time() * 1000)


def offload_ledger(client: LedgerClient, store: ObjectStore, target: LedgerInLog, *, password: bytes = b"",
                   delete_after_ms: int | None = None, stale_ms: int = ATTEMPT_STALE_MS,
                   step: Step = lambda s: None) -> OffloadRecord:
    """Offload `target` and return its OFFLOADED record (the existing one if it was offloaded
    before: a ledger is never offloaded twice). OffloadRefusedError says why not."""
    meta, _ = client.ledgers.read(target.ledger_id)
    existing = _check_offloadable(meta, password, stale_ms)
    if existing is not None:
        return existing
    attempt = layout.new_attempt()
    name = layout.ledger_file(target.log, target.log_ctime_ms, target.seq, target.ledger_id, attempt)
    started = _now_ms()
    enqueue(client.store, QueuedAttempt(attempt, target.ledger_id, store.uri, (name,), started))
    step("queued")
    announced = OffloadRecord(WRITING, attempt, store.uri, started, (OffloadedFile(name),))

    def announce(m: LedgerMetadata) -> LedgerMetadata:
        if _now_ms() - started >= stale_ms // 2:  # the queue pass deletes stale attempts' objects
            raise OffloadRefusedError(f"ledger {m.ledger_id}: offload attempt {attempt} too slow to announce")
        if _check_offloadable(m, password, stale_ms) is not None:
            raise OffloadRefusedError(f"ledger {m.ledger_id} was offloaded meanwhile")
        return with_record(m, announced)

    meta, _ = client.ledgers.update(target.ledger_id, announce)
    step("announced")
    last = meta.last_entry_id if meta.last_entry_id is not None else -1
    with client.open_ledger(target.ledger_id, password=password) as h:
        entries = list(h.read_entries(0, last)) if last >= 0 else []
    data, facts = write_ledger_file(target.log, target.seq, target.ledger_id, target.payload_format,
                                    target.joined_ms, entries)
    if not client.store.exists(attempt_path(attempt)):  # a queue pass gave this attempt up: write nothing
        raise OffloadRefusedError(f"ledger {target.ledger_id}: offload attempt {attempt} was given up")
    store.put(name, data)
    step("written")
    checksum = verify_file(store, name, data, target, entries)
    step("verified")
    done = OffloadedFile(name, len(data), checksum, facts.entries, facts.messages)

    def record(m: LedgerMetadata) -> LedgerMetadata:
        rec = offload_record(m)
        if rec is None or rec.attempt != attempt or rec.state != WRITING:
            raise OffloadRefusedError(f"ledger {m.ledger_id}: offload attempt {attempt} was replaced by another")
        return with_record(m, rec.finished((done,), _now_ms(), delete_after_ms))

    try:
        meta, _ = client.ledgers.update(target.ledger_id, record)
    except OffloadRefusedError:
        store.delete(name)  # lost to another attempt (its queue entry may be gone already)
        raise
    step("recorded")
    final = offload_record(meta)
    ensure(final is not None and final.offloaded, "a recorded offload attempt is OFFLOADED")
    log.info("ledger offloaded log=%s seq=%d ledger=%s file=%s/%s bytes=%d", target.log, target.seq,
             target.ledger_id, store.uri, name, len(data))
    return final  # type: ignore[return-value]  # ensure() above: not None


def _check_offloadable(meta: LedgerMetadata, password: bytes, stale_ms: int) -> OffloadRecord | None:
    """The existing OFFLOADED record, None when an attempt may start, else OffloadRefusedError."""
    if not meta.is_closed:
        raise OffloadRefusedError(f"ledger {meta.ledger_id} is not sealed")
    if (meta.length_bytes or 0) > OFFLOAD_LEDGER_BYTES_MAX:
        raise OffloadRefusedError(f"ledger {meta.ledger_id} holds {meta.length_bytes} bytes, over "
                                  f"OFFLOAD_LEDGER_BYTES_MAX ({OFFLOAD_LEDGER_BYTES_MAX}): roll logs over sooner")
    if meta.digest_type is DigestType.MAC and not meta.check_password(password):
        raise OffloadRefusedError(f"ledger {meta.ledger_id} is a `mac` ledger: only a caller with its password may "
                                  f"offload it (its files are not protected by the password)")
    try:
        rec = offload_record(meta)
    except MetadataError as exc:
        raise OffloadRefusedError(str(exc)) from exc
    if rec is None:
        return None
    if rec.offloaded:
        return rec
    if rec.state != WRITING:
        raise OffloadRefusedError(f"ledger {meta.ledger_id}: offload record in state {rec.state!r} (a newer release's)")
    if _now_ms() - rec.started_ms < stale_ms:
        raise OffloadRefusedError(f"ledger {meta.ledger_id}: offload attempt {rec.attempt} is in progress")
    return None


def verify_file(store: ObjectStore, name: str, data: bytes, target: LedgerInLog, entries: list[Entry]) -> int:
    """Read the file back from the store and compare every message with the ledger's; its crc32c."""
    back = store.get(name)
    checksum = crc32c.crc32c(back)
    if checksum != crc32c.crc32c(data) or len(back) != len(data):
        raise OffloadedFileError(f"{store.uri}/{name}: read back {len(back)} bytes that differ from the written ones")
    lf = LedgerFile(back, f"{store.uri}/{name}")
    if lf.facts.ledger_id != target.ledger_id or lf.facts.seq != target.seq or lf.facts.entries != len(entries):
        raise OffloadedFileError(f"{store.uri}/{name}: its metadata names another ledger or entry count")
    rebuilt = list(lf.entries(0, len(entries) - 1)) if entries else []
    if len(rebuilt) != len(entries):
        raise OffloadedFileError(f"{store.uri}/{name}: {len(rebuilt)} entries read back, {len(entries)} written")
    for orig, got in zip(entries, rebuilt):
        if not _same_messages(target, orig, got):
            raise OffloadedFileError(f"{store.uri}/{name}: entry {orig.entry_id} reads back different messages")
    return checksum


def _same_messages(t: LedgerInLog, orig: Entry, got: Entry) -> bool:
    if orig.entry_id != got.entry_id:
        return False
    if t.payload_format == "arrow":
        a = pa.ipc.open_stream(pa.py_buffer(orig.payload)).read_all()
        b = pa.ipc.open_stream(pa.py_buffer(got.payload)).read_all()
        return a.num_rows == b.num_rows and a.schema.names == b.schema.names and a.equals(b) and \
            append_ms_of(a.schema) == append_ms_of(b.schema)
    return list(messages(t.seq, t.ledger_id, orig)) == list(messages(t.seq, t.ledger_id, got))
