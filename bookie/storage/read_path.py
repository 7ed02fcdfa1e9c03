"""The read path of the storage engine: LAC reads, long polls, entry and range reads (index
lookup, then preads of the entry logs outside the lock). Owns the count of reads in flight, so
that an entry log is never removed (GC) or closed (shutdown) under a read."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from bookie.status import Status
from bookie.storage.config import (
    ENTRY_ID_MAX,
    LAC_NONE,
    READ_RANGE_BYTES_MAX,
    READ_RANGE_ENTRIES_MAX,
    WAIT_LAC_TIMEOUT_MAX_S,
)
from bookie.storage.engine_types import LedgerKey, ReadResult, _results, _valid_ledger
from bookie.storage.entry_log import EntryLogs
from bookie.storage.ledger_index import HOLE, LedgerMeta, unpack_location
from bookie.storage.ledger_table import LedgerTable
from bookie.storage.modes import EngineModes
from bookie.storage.range_read import RangeRead, read_window
from bookie.storage.stats import StorageStats

log = logging.getLogger(__name__)

T = TypeVar("T")

# Corrupt entries found by reads are logged at most once per this interval.
CORRUPT_LOG_INTERVAL_S = 1.0


def _capped_lac(meta: LedgerMeta) -> int:
    """The LAC a reader may see: never past a CLOSED ledger's last entry."""
    return meta.lac if meta.closed_last is None else min(meta.lac, meta.closed_last)


class ReadPath:
    def __init__(self, table: LedgerTable, logs: EntryLogs, modes: EngineModes,
                 stats: StorageStats) -> None:
        self._table = table
        self._logs = logs
        self._modes = modes
        self._stats = stats
        self._inflight = 0  # guarded by table.lock
        self._drained = threading.Condition(table.lock)
        self._corrupt_log_next = 0.0
        self._corrupt_log_suppressed = 0
        # Entry logs lost with their directory (reported once at open): their reads answer
        # UNKNOWN_ENTRY_STATE without an error line each.
        self.lost_log_ids: frozenset[int] = frozenset()

    # ---- quiescing ----------------------------------------------------------------------

    def when_idle(self, action: Callable[[], T], timeout_s: float) -> T | None:
        """Run `action` under the table lock once no read is in flight (none can start while it
        runs); None if reads were still in flight after `timeout_s`."""
        with self._table.lock:
            if not self._drained.wait_for(lambda: self._inflight == 0, timeout_s):
                return None
            return action()

    def reads_in_flight_locked(self) -> int:
        return self._inflight

    # ---- LAC ----------------------------------------------------------------------------

    def _missing_ledger_status(self) -> Status:
        # In uncertain mode we may have lost what we once had: never claim "no such ledger".
        return Status.UNKNOWN_ENTRY_STATE if self._modes.uncertain else Status.NO_SUCH_LEDGER

    def read_lac(self, ledger: LedgerKey) -> tuple[Status, int]:
        if not _valid_ledger(ledger):
            return Status.INVALID_REQUEST, LAC_NONE
        table = self._table
        with table.lock:
            if table.closed:
                return Status.INTERNAL_ERROR, LAC_NONE
            meta = table.live_locked(ledger)
            if meta is None:
                return self._missing_ledger_status(), LAC_NONE
            return Status.OK, _capped_lac(meta)

    def wait_lac(self, ledger: LedgerKey, min_lac: int, timeout_s: float) -> tuple[Status, int]:
        """Long poll: return as soon as LAC >= min_lac, or at the timeout with the current LAC
        (status OK either way; NO_SUCH_LEDGER if the ledger is unknown or gets deleted)."""
        if not _valid_ledger(ledger) or not isinstance(min_lac, int):
            return Status.INVALID_REQUEST, LAC_NONE
        deadline = time.monotonic() + min(max(timeout_s, 0.0), WAIT_LAC_TIMEOUT_MAX_S)
        table = self._table
        with table.lock:
            meta = table.live_locked(ledger)
            if table.closed:
                return Status.INTERNAL_ERROR, LAC_NONE
            if meta is None:
                return self._missing_ledger_status(), LAC_NONE
            if meta.lac >= min_lac:
                return Status.OK, _capped_lac(meta)
            waiters = table.join_waiters_locked(ledger)
            try:
                while meta.lac < min_lac and not meta.deleted and not table.closed:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    waiters.cond.wait(remaining)
            finally:
                table.leave_waiters_locked(ledger, waiters)
            if meta.deleted:
                return self._missing_ledger_status(), LAC_NONE
            return Status.OK, _capped_lac(meta)

    # ---- entries ------------------------------------------------------------------------

    def read_entry(self, ledger: LedgerKey, entry_id: int) -> ReadResult:
        """One entry. When the ledger itself is missing (or the request invalid) the result
        carries that status (NO_SUCH_LEDGER, UNKNOWN_ENTRY_STATE, INVALID_REQUEST, ...)."""
        status, results = self.read_range(ledger, entry_id, entry_id, 1, READ_RANGE_BYTES_MAX)
        if status != Status.OK:
            return ReadResult(entry_id if isinstance(entry_id, int) else -1, status, b"")
        return results[0]

    def read_range(self, ledger: LedgerKey, first: int, last: int, max_entries: int,
                   max_bytes: int) -> tuple[Status, list[ReadResult]]:
        """Entries first..last in order, stopping after max_entries, or before the entry that
        would take the data past max_bytes (the first entry is always returned). Missing ids
        give NO_SUCH_ENTRY (UNKNOWN_ENTRY_STATE in uncertain mode); corrupt ones
        UNKNOWN_ENTRY_STATE. Contiguous entries are read with one pread."""
        status, answer = self.read_runs(ledger, first, last, max_entries, max_bytes)
        return status, _results(answer) if answer is not None else []

    def read_runs(self, ledger: LedgerKey, first: int, last: int, max_entries: int,
                  max_bytes: int) -> tuple[Status, RangeRead | None]:
        """read_range's answer in bulk form (range_read.RangeRead): the verified entries as
        runs of consecutive ids, each one buffer plus lengths, and the other ids with their
        status. None unless the status is OK."""
        if (not _valid_ledger(ledger) or not isinstance(first, int) or not isinstance(last, int)
                or not 0 <= first <= last <= ENTRY_ID_MAX or max_entries < 1 or max_bytes < 0):
            return Status.INVALID_REQUEST, None
        count = min(last - first + 1, max_entries, READ_RANGE_ENTRIES_MAX)
        max_bytes = min(max_bytes, READ_RANGE_BYTES_MAX)
        table = self._table
        with table.lock:
            if table.closed:
                return Status.INTERNAL_ERROR, None
            meta = table.live_locked(ledger)
            if meta is None:
                return self._missing_ledger_status(), None
            locs, lens = meta.index.window(first, count)
            if meta.closed_last is not None and first + count - 1 > meta.closed_last:
                # A dirty tail (past a CLOSED ledger's last entry): never served, as if absent.
                for i in range(max(meta.closed_last + 1 - first, 0), count):
                    locs[i] = HOLE
            missing = Status.UNKNOWN_ENTRY_STATE if self._modes.uncertain else Status.NO_SUCH_ENTRY
            self._inflight += 1
        answer = RangeRead()
        try:
            answer = read_window(self._logs.pread, ledger, first, locs, lens, max_bytes, missing)
        finally:
            self._count_read(answer)
        for log_id, offset, error in answer.failed_preads:
            if log_id in self.lost_log_ids:
                continue
            log.error("entry log read failed ledger=%s log_id=%d offset=%d error=%s",
                      ledger, log_id, offset, error)
        for c in answer.corrupt:
            # Never NO_SUCH_ENTRY for an entry we hold a damaged copy of: it might be the one
            # recovery is asking about (PAR / TigerBeetle "do not nack corrupt entries").
            self._report_corrupt(ledger, c.entry_id, c.location, c.length)
        return Status.OK, answer

    def _count_read(self, answer: RangeRead) -> None:
        with self._table.lock:
            self._inflight -= 1
            if self._table.closed and self._inflight == 0:
                self._drained.notify_all()
            stats = self._stats
            stats.read_calls += 1
            stats.reads += answer.count
            stats.read_bytes += answer.data_bytes
            stats.corrupt_reads += len(answer.corrupt)
            stats.read_preads += answer.preads

    def _report_corrupt(self, ledger: LedgerKey, entry_id: int, loc: int, length: int) -> None:
        # At most one line per CORRUPT_LOG_INTERVAL_S: a damaged log file read in a loop must
        # not flood the log (stats()["corrupt_reads"] counts them all).
        now = time.monotonic()
        if now < self._corrupt_log_next:
            self._corrupt_log_suppressed += 1
            return
        log_id, offset = unpack_location(loc)
        log.error("corrupt entry (crc/header mismatch) ledger=%s entry=%d log_id=%d offset=%d "
                  "length=%d suppressed_since_last=%d", ledger, entry_id, log_id, offset, length,
                  self._corrupt_log_suppressed)
        self._corrupt_log_next = now + CORRUPT_LOG_INTERVAL_S
        self._corrupt_log_suppressed = 0
