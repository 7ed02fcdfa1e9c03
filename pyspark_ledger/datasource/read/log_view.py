"""One log as a read plan sees it: its head and, fetched only when needed, its segments
(metadata.log_segments: immutable runs of 256 sealed ledgers, then the head's open tail).

Finding the row of a time reads O(log n) segments: a binary search over the segments by their
last ledger's seal time, then the search of log/time_lookup.py from the segment found. It
assumes times do not step back along the log (one writer's clock).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from metadata import LedgerId
from metadata.log_record import LogLedger
from metadata.log_segments import SEGMENT_LEDGERS, LogHead
from pyspark_ledger.log.position import Position
from pyspark_ledger.log.time_lookup import position_at_time

if TYPE_CHECKING:
    from pyspark_ledger.client import LedgerClient
    from pyspark_ledger.ledger.read_handle import ReadHandle


class HeadView:
    """cuts.LogLedgers over a LedgerClient and one read of the log's head."""

    def __init__(self, client: LedgerClient, head: LogHead, password: bytes = b""):
        self.client = client
        self.head = head
        self.password = password  # to read the entries a search by time bisects
        self._handles: dict[LedgerId, ReadHandle] = {}
        self.name = head.record.name
        self.trim_seq = max(head.trim_seq, head.record.trim_seq)
        self.next_seq = head.record.next_seq

    def ledgers(self, from_seq: int = 0) -> Iterator[LogLedger]:
        """The log's ledgers from `from_seq` on, in order, each segment fetched only when reached."""
        return self.client.logs.iter_ledgers(self.name, self.head, from_seq)

    def at_or_after(self, seq: int) -> LogLedger | None:
        return next(self.ledgers(seq), None)

    def _segment(self, index: int) -> tuple[LogLedger, ...]:
        return tuple(lg for lg in self.client.logs.segment(self.name, index) if lg.seq >= self.trim_seq)

    def position_at_time(self, ms: int) -> Position | None:
        """The first row at or after `ms` (log/time_lookup.py), from the first segment whose last
        ledger may hold it (bisected by seal time, or join time for ledgers sealed before seal
        times): O(log n) segments, then the few entries the search reads."""
        lo = max(self.head.seg_first, self.trim_seq // SEGMENT_LEDGERS)
        hi = self.head.seg_next  # segments [lo, hi); the head's tail after them
        while lo < hi:  # the first segment whose last ledger may hold a row at or after ms
            mid = (lo + hi) // 2
            seg = self._segment(mid)
            if seg and _upper_ms(seg[-1]) >= ms:
                hi = mid
            else:
                lo = mid + 1
        from_seq = max(lo * SEGMENT_LEDGERS, self.trim_seq)
        try:
            return position_at_time(self.ledgers(from_seq), ms, self._handle, self.next_seq)
        finally:
            for h in self._handles.values():
                h.close()
            self._handles.clear()

    def _handle(self, lg: LogLedger) -> ReadHandle:
        h = self._handles.get(lg.ledger_id)
        if h is None:
            h = self._handles[lg.ledger_id] = self.client.open_ledger(lg.ledger_id, password=self.password)
        return h


def _upper_ms(lg: LogLedger) -> int:
    """The latest time a sealed ledger of a segment may hold (its seal time; before seal times,
    its join time: such ledgers keep the ledger-level time)."""
    return lg.sealed_ms if lg.sealed_ms is not None else lg.ctime_ms
