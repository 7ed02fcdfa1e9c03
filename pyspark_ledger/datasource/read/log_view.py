"""One log as a read plan sees it: its head and, fetched only when needed, its segments
(metadata.log_segments: immutable runs of 256 sealed ledgers, then the head's open tail).

Finding the ledger of a time reads O(log n) segments: a binary search over the segments by their
last ledger's time, then a scan from the segment found. It assumes times do not step back along
the log (they are the writers' clocks when each ledger joined the log).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from metadata.log_record import LogLedger
from metadata.log_segments import SEGMENT_LEDGERS, LogHead

if TYPE_CHECKING:
    from pyspark_ledger.client import LedgerClient


class HeadView:
    """cuts.LogLedgers over a LedgerClient and one read of the log's head."""

    def __init__(self, client: LedgerClient, head: LogHead):
        self.client = client
        self.head = head
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

    def first_at_or_after_time(self, ms: int) -> LogLedger | None:
        lo = max(self.head.seg_first, self.trim_seq // SEGMENT_LEDGERS)
        hi = self.head.seg_next  # segments [lo, hi); the head's tail after them
        while lo < hi:  # the first segment whose last ledger joined at or after ms
            mid = (lo + hi) // 2
            seg = self._segment(mid)
            if seg and seg[-1].ctime_ms >= ms:
                hi = mid
            else:
                lo = mid + 1
        from_seq = max(lo * SEGMENT_LEDGERS, self.trim_seq)
        return next((lg for lg in self.ledgers(from_seq) if lg.ctime_ms >= ms), None)
