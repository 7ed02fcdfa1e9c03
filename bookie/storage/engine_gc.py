"""The storage engine's side of garbage collection: live/dead bytes per entry log (rebuilt
from the index, so nothing extra has to be durable), dirty-tail caps, and removal of entry
logs no live entry points into.

Crash safety of a removal: a log is removed only after a checkpoint persisted every deletion
that made it dead, and under the engine lock with no read in flight; the journal never points
into entry logs (replay re-appends), so a restart can never need a removed log. A log left
behind by a crash between the checkpoint and the unlink is dead at the next open and removed
by the same code then (reclaim_entry_logs runs at open).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from bookie.storage import records
from bookie.storage.engine_fields import EngineFields
from bookie.storage.engine_types import LedgerKey
from bookie.storage.ledger_index import unpack_location

log = logging.getLogger(__name__)

# How long a removal waits for reads in flight to finish before trying again later.
REMOVE_READS_WAIT_S = 1.0


class GcMixin(EngineFields):
    """Part of BookieStorage (engine.py): uses its fields and lock."""

    def attach_gc(self, collector: Any) -> None:
        """The bookie's GarbageCollector (bookie/gc_service.start_gc), for the admin surface."""
        self._gc_collector = collector

    def gc_stats(self) -> dict[str, Any]:
        """bookie/admin.py's GC figures (keys in docs/storage.md)."""
        collector = getattr(self, "_gc_collector", None)
        if collector is not None:
            return collector.stats()
        usage = self.entry_log_usage()
        live = sum(v[1] for v in usage.values())
        return {"live_bytes": live, "dead_bytes": max(sum(v[0] for v in usage.values()) - live, 0),
                "entry_log_count": len(usage)}

    def run_gc_now(self, progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
        """`ledger triggergc`: one GC round and a major compaction now, with progress."""
        collector = getattr(self, "_gc_collector", None)
        if collector is None:
            raise RuntimeError("no garbage collector attached to this storage")
        result: dict[str, Any] = collector.run_now(progress=progress)
        return result

    def set_closed_last(self, ledger: LedgerKey, last_entry: int) -> None:
        """Metadata says the ledger is CLOSED at last_entry: entries past it (a fenced writer's
        dirty tail) are never served again. The cap goes into the ledger's checkpoint
        snapshot (the round's reclaim_entry_logs checkpoints), so a restart keeps it."""
        with self._lock:
            meta = self._ledgers.get(ledger)
            if meta is not None and not meta.deleted and meta.closed_last != last_entry:
                meta.closed_last = last_entry
                self._dirty.add(ledger)

    def entry_log_usage(self) -> dict[int, tuple[int, int]]:
        """(file bytes, live bytes) per entry log. Live = entries of non-deleted ledgers, up to
        a CLOSED ledger's last entry."""
        sizes = self._logs.sizes()
        live = dict.fromkeys(sizes, 0)
        with self._lock:
            metas = [m for m in self._ledgers.values() if not m.deleted]
        for meta in metas:
            cap = meta.closed_last
            for entry_id, loc, length in meta.index.items():
                if cap is not None and entry_id > cap:
                    continue
                log_id, _ = unpack_location(loc)
                live[log_id] = live.get(log_id, 0) + records.ENTRY_HEADER_BYTES + length
        return {log_id: (sizes.get(log_id, 0), live[log_id]) for log_id in live}

    def reclaim_entry_logs(self) -> int:
        """Checkpoint, then remove every entry log (but the current one) with no live entry and
        no index location into it. Returns the bytes freed."""
        self.checkpoint()  # the deletions that made logs dead are durable before any unlink
        usage = self.entry_log_usage()
        referenced = self._referenced_logs()
        keep = {self._logs.current_id, *self._logs.protected}
        dead = [log_id for log_id, (_, live) in usage.items()
                if live == 0 and log_id not in keep and log_id not in referenced]
        freed = 0
        for log_id in sorted(dead):
            with self._lock:
                if not self._reads_drained.wait_for(lambda: self._reads_inflight == 0,
                                                    REMOVE_READS_WAIT_S):
                    break  # busy reads: the next GC round removes the rest
                freed += self._logs.remove(log_id)
        return freed

    def _referenced_logs(self) -> set[int]:
        # Dirty tails are not live but are still in the index: their logs stay until the
        # compaction rewrites the ledger (so a removed log is never pointed into).
        with self._lock:
            metas = [m for m in self._ledgers.values() if not m.deleted]
        out: set[int] = set()
        for meta in metas:
            for _, loc, _ in meta.index.items():
                out.add(unpack_location(loc)[0])
        return out
