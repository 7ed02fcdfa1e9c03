"""The storage engine's side of garbage collection (the rounds themselves run in gc.py): live
and dead bytes per entry log (rebuilt from the index, so nothing extra has to be durable),
dirty-tail caps, and removal of entry logs no live entry points into.

Crash safety of a removal: a log is removed only after a checkpoint persisted every deletion
that made it dead, and under the table lock with no read in flight; the journal never points
into entry logs (replay re-appends), so a restart can never need a removed log. A log left
behind by a crash between the checkpoint and the unlink is dead at the next open and removed
by the same code then (reclaim runs at open).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from bookie.storage import records
from bookie.storage.engine_types import LedgerKey
from bookie.storage.entry_log import EntryLogs
from bookie.storage.ledger_index import unpack_location
from bookie.storage.ledger_table import LedgerTable
from bookie.storage.read_path import ReadPath

log = logging.getLogger(__name__)

# How long a removal waits for reads in flight to finish before trying again later.
REMOVE_READS_WAIT_S = 1.0


class EntryLogGc:
    def __init__(self, table: LedgerTable, logs: EntryLogs, reads: ReadPath,
                 checkpoint: Callable[[], None]) -> None:
        self._table = table
        self._logs = logs
        self._reads = reads
        self._checkpoint = checkpoint
        self._collector: Any = None  # the bookie's GarbageCollector, for the admin surface

    # ---- the bookie's collector ---------------------------------------------------------

    def attach(self, collector: Any) -> None:
        self._collector = collector

    def stats(self) -> dict[str, Any]:
        if self._collector is not None:
            result: dict[str, Any] = self._collector.stats()
            return result
        usage = self.entry_log_usage()
        live = sum(v[1] for v in usage.values())
        return {"live_bytes": live, "dead_bytes": max(sum(v[0] for v in usage.values()) - live, 0),
                "entry_log_count": len(usage)}

    def run_now(self, progress: Callable[[str, int, int], None] | None) -> dict[str, Any]:
        if self._collector is None:
            raise RuntimeError("no garbage collector attached to this storage")
        result: dict[str, Any] = self._collector.run_now(progress=progress)
        return result

    # ---- what GC decides on -------------------------------------------------------------

    def set_closed_last(self, ledger: LedgerKey, last_entry: int) -> None:
        """Metadata says the ledger is CLOSED at last_entry: cap its dirty tail (persisted by the
        next checkpoint)."""
        with self._table.lock:
            meta = self._table.live_locked(ledger)
            if meta is not None and meta.closed_last != last_entry:
                meta.closed_last = last_entry
                self._table.mark_dirty_locked(ledger)

    def entry_log_usage(self) -> dict[int, tuple[int, int]]:
        """(file bytes, live bytes) per entry log. Live = entries of non-deleted ledgers, up to
        a CLOSED ledger's last entry."""
        sizes = self._logs.sizes()
        live = dict.fromkeys(sizes, 0)
        for _, meta in self._table.live():
            cap = meta.closed_last
            for entry_id, loc, length in meta.index.items():
                if cap is not None and entry_id > cap:
                    continue
                log_id, _ = unpack_location(loc)
                live[log_id] = live.get(log_id, 0) + records.ENTRY_HEADER_BYTES + length
        return {log_id: (sizes.get(log_id, 0), live[log_id]) for log_id in live}

    # ---- removal ------------------------------------------------------------------------

    def reclaim(self) -> int:
        """Checkpoint, then remove every entry log (but the current one) with no live entry and
        no index location into it. Returns the bytes freed."""
        self._checkpoint()  # the deletions that made logs dead are durable before any unlink
        usage = self.entry_log_usage()
        referenced = self._referenced_logs()
        keep = {self._logs.current_id, *self._logs.protected}
        dead = [log_id for log_id, (_, live) in usage.items()
                if live == 0 and log_id not in keep and log_id not in referenced]
        freed = 0
        for log_id in sorted(dead):
            removed = self._reads.when_idle(partial(self._logs.remove, log_id), REMOVE_READS_WAIT_S)
            if removed is None:
                break  # busy reads: the next GC round removes the rest
            freed += removed
        return freed

    def _referenced_logs(self) -> set[int]:
        # Dirty tails are not live but are still in the index: their logs stay until the
        # compaction rewrites the ledger (so a removed log is never pointed into).
        out: set[int] = set()
        for _, meta in self._table.live():
            for _, loc, _ in meta.index.items():
                out.add(unpack_location(loc)[0])
        return out
