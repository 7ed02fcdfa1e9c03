"""Is a ledger in a log? Answered from the newest ledger back, bounded (issue 19 item 2).

Staging cleanup (Spark jobs, streaming batches) and the orphan auditor ask whether ledgers are in a
log. The ledgers they ask about were appended recently if at all, so the walk starts at the head's
tail and fetches segments backwards only while an asked-for ledger is still unfound, at most
`scan_ledgers_max` ledgers in all. Past that bound the answer is "unknown", which callers treat as
"in the log": a ledger is never deleted on a guess; what is kept by mistake the orphan auditor
finds later (its own walk goes further each pass).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from metadata import log_segments as segs
from metadata.errors import NoSuchLogError
from metadata.ids import LedgerId
from metadata.log_record import LogLedger
from metadata.log_segments import LogHead
from metadata.paths import log_segment_path
from metadata.store import MetadataStore


class LogHeads(Protocol):
    """What a lookup reads (metadata.logs.LogManager has it): a log's head, its immutable
    segments, and the store for the deletion queue's kept segments. A protocol, so this module
    needs nothing from metadata.logs, which builds lookups."""

    store: MetadataStore

    def read_head(self, name: str) -> tuple[LogHead, int]: ...

    def segment(self, name: str, index: int) -> tuple[LogLedger, ...]: ...

SCAN_LEDGERS_MAX = 64 * segs.SEGMENT_LEDGERS  # newest ledgers one lookup walks (64 segments)


class LedgerLookup:
    """Membership of ledgers in one log, as of one read of its head. `in` is True for a ledger of
    the log AND for one the bounded walk could not rule out (never delete on a guess)."""

    def __init__(self, logs: LogHeads, name: str, scan_ledgers_max: int = SCAN_LEDGERS_MAX, *,
                 include_queued: bool = False):
        """include_queued: ledgers trimmed but not deleted yet (the deletion queue) count as in."""
        self.logs, self.name, self.scan_ledgers_max = logs, name, scan_ledgers_max
        self.include_queued = include_queued
        self.head: LogHead | None
        try:
            self.head = logs.read_head(name)[0]
        except NoSuchLogError:
            self.head = None
        self.exists = self.head is not None
        self._seen: set[LedgerId] = set()
        self._walk = self._newest_first() if self.head is not None else iter(())
        self._walked = 0
        self.complete = self.head is None  # the whole log was walked: every answer is exact

    def _newest_first(self) -> Iterator[LogLedger]:
        head = self.head
        assert head is not None
        low = head.trim_seq
        yield from reversed(head.record.ledgers)
        for index in range(head.seg_next - 1, head.seg_first - 1, -1):
            yield from (lg for lg in reversed(self.logs.segment(self.name, index)) if lg.seq >= low)
        if not self.include_queued:
            return
        # The deletion queue [deleted_seq, trim_seq): its segments are kept until their ledgers go.
        for index in range(min(head.seg_first, head.seg_next) , head.deleted_seq // segs.SEGMENT_LEDGERS - 1, -1):
            got = self.logs.store.get(log_segment_path(self.name, index))
            if got is not None:
                ledgers = segs.decode_segment(got.value, f"log {self.name!r} segment {index}")
                yield from (lg for lg in reversed(ledgers) if head.deleted_seq <= lg.seq < low)

    def _advance_until(self, lid: LedgerId) -> bool:
        while self._walked < self.scan_ledgers_max:
            lg = next(self._walk, None)
            if lg is None:
                self.complete = True
                return False
            self._walked += 1
            self._seen.add(lg.ledger_id)
            if lg.ledger_id == lid:
                return True
        return False

    def known(self, lid: LedgerId) -> bool | None:
        """True: in the log; False: not in it; None: the bounded walk could not tell."""
        if lid in self._seen or (self.head is not None and lid in self.head.record.pending_deletions):
            return True
        if self._advance_until(lid):
            return True
        return False if self.complete else None

    def __contains__(self, lid: object) -> bool:
        return isinstance(lid, LedgerId) and self.known(lid) is not False

    def found(self, ids: set[LedgerId]) -> set[LedgerId]:
        """The ids in the log or not ruled out (kept by a cleanup)."""
        return {lid for lid in ids if lid in self}
