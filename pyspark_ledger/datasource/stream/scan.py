"""What a stream has not read yet of one log: the readable entries from its position to the
log's readable end (closed ledgers to their last entry, the open one to its LAC), ledger by ledger,
with their bytes. Admission control (admission.py) cuts a micro-batch from it, and what
the batch leaves is the log's lag.

Bytes come from the log's metadata, without reading entries: a sealed ledger's size is exact;
part of a ledger is counted pro rata (exact when its entries have one size); an open ledger's
size is unknown until it is sealed, so its entries count at the average entry size of the log's
most recent sealed ledger (ASSUMED_ENTRY_BYTES when it has none).

A scan stops after the first ledger that is not closed (what follows it must wait: its last
entries may still be confirmed), and after SCAN_LEDGERS_MAX ledgers (a stream far behind then
reads and reports lag up to there; `complete` says so).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from metadata import NoSuchLedgerError
from metadata.log_record import LogLedger
from metadata.log_segments import LogHead
from pyspark_ledger.datasource.options.source_options import LedgerSourceOptions
from pyspark_ledger.datasource.read.planning import last_readable, log_ledgers
from pyspark_ledger.datasource.stream.offsets import LogOffset

if TYPE_CHECKING:
    from pyspark_ledger.client import LedgerClient

# Bytes per entry assumed for an open ledger of a log that has no sealed ledger to learn from.
ASSUMED_ENTRY_BYTES = 1024
# Ledgers one scan walks (16 segments of 256): bounds the metadata reads of one trigger.
SCAN_LEDGERS_MAX = 4096


@dataclass(frozen=True, slots=True)
class Chunk:
    """Readable entries first..last of one ledger, not read yet, and their bytes."""

    seq: int
    ledger: str  # qualified name
    first: int
    last: int
    bytes: int
    after: LogOffset  # the position after entry `last`: the next ledger's start once this one is closed

    @property
    def entries(self) -> int:
        return self.last - self.first + 1

    def bytes_of(self, n: int) -> int:
        """Bytes of the first n entries (pro rata)."""
        return self.bytes * n // self.entries


@dataclass(frozen=True, slots=True)
class LogScan:
    name: str
    start: LogOffset
    chunks: tuple[Chunk, ...]
    complete: bool = True  # False: stopped at SCAN_LEDGERS_MAX before the readable end

    @property
    def entries(self) -> int:
        return sum(c.entries for c in self.chunks)

    @property
    def bytes(self) -> int:
        return sum(c.bytes for c in self.chunks)

    @property
    def tail(self) -> LogOffset:
        """The position after the last readable entry (the start when there is none)."""
        return self.chunks[-1].after if self.chunks else self.start


@dataclass(frozen=True, slots=True)
class _Seen:
    lg: LogLedger
    first: int
    last: int  # last readable entry
    size: int | None  # bytes of the whole ledger when closed
    closed: bool


def _recent_entry_bytes(client: LedgerClient, head: LogHead, seen: list[_Seen]) -> int:
    """The average entry size of the log's most recent sealed ledger: one the scan saw, else in the
    head's tail, else the last segment's last (one segment read, cached by the client)."""
    for s in reversed(seen):
        if s.closed and s.size is not None and s.last >= 0:
            return max(1, s.size // (s.last + 1))
    ledgers: tuple[LogLedger, ...] = head.record.ledgers
    if not any(lg.sealed for lg in ledgers) and head.seg_next > head.seg_first:
        ledgers = client.logs.segment(head.record.name, head.seg_next - 1)
    for lg in reversed(ledgers):
        if lg.sealed and lg.entry_count:
            return max(1, (lg.size_bytes or 0) // lg.entry_count)
    return ASSUMED_ENTRY_BYTES


def _seen(client: LedgerClient, opts: LedgerSourceOptions, lg: LogLedger, first: int) -> _Seen | None:
    if lg.sealed:
        return _Seen(lg, first, (lg.entry_count or 0) - 1, lg.size_bytes or 0, True)
    try:
        meta, version = client.ledgers.read(lg.ledger_id)
    except NoSuchLedgerError:
        return None  # deleted (a trim under way): planning the batch reports the loss
    last = last_readable(client, meta, version, opts)
    return _Seen(lg, first, last, meta.length_bytes if meta.is_closed else None, meta.is_closed)


def _walk(client: LedgerClient, opts: LedgerSourceOptions, head: LogHead, start: LogOffset
          ) -> tuple[list[_Seen], LogOffset | None, bool]:
    """The ledgers from the start to the first one not closed; then where the log goes on after
    the last closed one (None: an open ledger ends the walk) and whether the walk was complete."""
    seen: list[_Seen] = []
    for lg in log_ledgers(client, head, start.seq):
        if len(seen) >= SCAN_LEDGERS_MAX:
            return seen, LogOffset(lg.seq, 0, lg.ledger_id.qualified_name), False
        item = _seen(client, opts, lg, start.entry if lg.seq == start.seq else 0)
        if item is None:
            continue
        seen.append(item)
        if not item.closed:
            return seen, None, True
    return seen, LogOffset(max(head.record.next_seq, start.seq), 0), True


def scan_log(client: LedgerClient, opts: LedgerSourceOptions, head: LogHead, start: LogOffset) -> LogScan:
    seen, beyond, complete = _walk(client, opts, head, start)
    per_entry = _recent_entry_bytes(client, head, seen)
    chunks: list[Chunk] = []
    for i, s in enumerate(seen):
        if s.last < s.first:
            continue
        n = s.last + 1 - s.first
        size = s.size * n // (s.last + 1) if s.size is not None else per_entry * n
        if not s.closed:
            after = LogOffset(s.lg.seq, s.last + 1, s.lg.ledger_id.qualified_name)
        elif i + 1 < len(seen):
            nxt = seen[i + 1].lg
            after = LogOffset(nxt.seq, 0, nxt.ledger_id.qualified_name)
        else:
            assert beyond is not None  # the walk ends on a closed ledger only when nothing follows it
            after = beyond
        chunks.append(Chunk(s.lg.seq, s.lg.ledger_id.qualified_name, s.first, s.last, size, after))
    return LogScan(head.record.name, start, tuple(chunks), complete)


def tail_of(client: LedgerClient, opts: LedgerSourceOptions, head: LogHead) -> LogOffset:
    """The log's readable end, found from the head's tail (segments hold only sealed ledgers
    before it), so it costs no segment read however long the log."""
    rec = head.record
    if not rec.ledgers:
        return LogOffset(max(rec.next_seq, head.trim_seq, rec.trim_seq), 0)
    first = rec.ledgers[0]
    scan = scan_log(client, opts, head, LogOffset(first.seq, 0, first.ledger_id.qualified_name))
    if scan.chunks:
        return scan.tail
    return LogOffset(first.seq, 0, first.ledger_id.qualified_name)
