"""The storage engine's compaction: the live entries of entry logs whose live fraction is under
a threshold are copied into a new log, the index is pointed at the copies, and the old logs are
removed (the reclaim step, entry_log_gc.EntryLogGc.reclaim, passed in by the engine).

Crash safety, step by step: (1) the copies are written to a new log and fsynced; nothing
points into it yet, so a crash leaves an unreferenced log that the next open removes.
(2) The in-memory index is switched to the copies (only entries still at their old location:
a ledger deleted meanwhile keeps its deletion). (3) A checkpoint makes the switch durable;
before it the durable index still points into the old logs, which still exist. (4) The old logs,
now unreferenced, are removed; a crash before that leaves them for the next open to remove.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from bookie.storage import records
from bookie.storage.engine_types import LedgerKey
from bookie.storage.entry_log import EntryLogs
from bookie.storage.ledger_index import HOLE, pack_location, unpack_location
from bookie.storage.ledger_table import LedgerTable

log = logging.getLogger(__name__)

# Free space kept beyond the bytes a compaction copies, so that it never fills the disk.
COMPACTION_FREE_MARGIN_BYTES = 64 * 2**20
# Entries copied between two rate-limit sleeps (bounds one sleep).
THROTTLE_CHUNK_BYTES = 1 * 2**20
# The current entry log is rolled for compaction once it holds this fraction of the log size
# limit and its live fraction is under the threshold: otherwise a bookie with little traffic
# would keep up to a whole log of dead bytes until appends fill it.
CURRENT_LOG_ROLL_FRACTION = 1 / 16

Move = tuple[LedgerKey, int, int, int]  # ledger, entry id, location, length


Usage = Callable[[], dict[int, tuple[int, int]]]  # (file bytes, live bytes) per entry log


class Compactor:
    def __init__(self, table: LedgerTable, logs: EntryLogs, usage: Usage, entry_log_max_bytes: int,
                 fsync: bool) -> None:
        self._table = table
        self._logs = logs
        self._usage = usage
        self._entry_log_max_bytes = entry_log_max_bytes
        self._fsync = fsync

    def candidates(self, threshold: float) -> dict[int, tuple[int, int]]:
        """Entry logs (never the current one) whose live fraction is under threshold."""
        keep = {self._logs.current_id, *self._logs.protected}
        return {log_id: (size, live) for log_id, (size, live) in self._usage().items()
                if log_id not in keep and size > 0 and live / size < threshold}

    def roll_dead_current(self, threshold: float) -> bool:
        """Roll the current entry log if it is big enough and under threshold, so that this
        compaction can take it. True if it rolled."""
        current = self._logs.current_id
        size, live = self._usage().get(current, (0, 0))
        if size < self._entry_log_max_bytes * CURRENT_LOG_ROLL_FRACTION or live / size >= threshold:
            return False
        rolled = self._logs.roll_current(current)
        if rolled:
            log.info("current entry log rolled for compaction log_id=%d size=%d live=%d", current, size, live)
        return rolled

    def compact(self, threshold: float, rate_bytes_s: float, reclaim: Callable[[], int]) -> tuple[int, int]:
        """Rewrite the logs under threshold; `reclaim` checkpoints and removes the logs left
        dead (steps 3 and 4). Returns (logs compacted, net bytes reclaimed)."""
        self.roll_dead_current(threshold)
        candidates = self.candidates(threshold)
        if not candidates:
            return 0, 0
        to_copy = sum(live for _, live in candidates.values())
        free = self._logs.side_log_free_bytes()
        if to_copy + COMPACTION_FREE_MARGIN_BYTES > free:
            log.warning("compaction skipped: the disk is too full to copy live_bytes=%d free=%d "
                        "margin=%d logs=%d", to_copy, free, COMPACTION_FREE_MARGIN_BYTES,
                        len(candidates))
            return 0, 0
        copies, tails = self._entries_in(set(candidates))
        side_id, fd = self._logs.open_side_log()
        try:
            moved = self._copy_entries(copies, side_id, fd, rate_bytes_s)
            table = self._table
            with table.lock:
                for ledger, entry_id, old, new in moved + [(lg, e, o, HOLE) for lg, e, o, _ in tails]:
                    meta = table.live_locked(ledger)
                    if meta is not None and meta.index.relocate(entry_id, old, new):
                        table.mark_dirty_locked(ledger)
            freed = reclaim()
        finally:
            self._logs.release_side_log(side_id)
        copied = sum(records.ENTRY_HEADER_BYTES + length for _, _, _, length in copies)
        log.info("compaction done logs=%d entries_copied=%d bytes_copied=%d "
                 "dirty_tail_entries_dropped=%d removed_bytes=%d", len(candidates), len(moved),
                 copied, len(tails), freed)
        return len(candidates), max(freed - copied, 0)  # net: the copies take space too

    def _entries_in(self, log_ids: set[int]) -> tuple[list[Move], list[Move]]:
        """(live entries, dirty-tail entries) of existing ledgers stored in log_ids."""
        copies: list[Move] = []
        tails: list[Move] = []
        for ledger, meta in self._table.live():
            cap = meta.closed_last
            for entry_id, loc, length in list(meta.index.items()):
                if unpack_location(loc)[0] in log_ids:
                    dest = tails if cap is not None and entry_id > cap else copies
                    dest.append((ledger, entry_id, loc, length))
        return copies, tails

    def _copy_entries(self, copies: list[Move], side_id: int, fd: int,
                      rate_bytes_s: float) -> list[tuple[LedgerKey, int, int, int]]:
        moved: list[tuple[LedgerKey, int, int, int]] = []
        offset = chunk = 0
        started = time.monotonic()
        for ledger, entry_id, loc, length in copies:
            log_id, at = unpack_location(loc)
            data = self._logs.pread(log_id, at, records.ENTRY_HEADER_BYTES + length)
            os.pwrite(fd, data, offset)
            moved.append((ledger, entry_id, loc, pack_location(side_id, offset)))
            offset += len(data)
            chunk += len(data)
            if chunk >= THROTTLE_CHUNK_BYTES and rate_bytes_s > 0:
                chunk = 0
                ahead = offset / rate_bytes_s - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(min(ahead, 1.0))
        if self._fsync:
            os.fsync(fd)  # the copies are durable before any index points at them
        return moved
