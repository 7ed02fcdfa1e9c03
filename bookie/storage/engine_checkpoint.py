"""The storage engine's checkpoint: index snapshots + manifest, then journal trimming."""

from __future__ import annotations

import logging
import time

from bookie.storage.checkpoint import encode_ledger, write_ledger_snapshots, write_manifest
from bookie.storage.engine_fields import EngineFields
from bookie.storage.errors import InvariantError
from bookie.storage.journal import delete_journal_files_before

log = logging.getLogger(__name__)


class CheckpointMixin(EngineFields):
    """Part of BookieStorage (engine.py): uses its fields and lock."""

    # ---- checkpoint ---------------------------------------------------------------------

    def _checkpoint_loop(self) -> None:
        interval_s = self._config.checkpoint_interval_s
        while not self._stop.wait(interval_s):
            try:
                self.checkpoint()
            except Exception:
                log.exception("checkpoint failed data_dir=%s; will retry", self._data_dir)

    def checkpoint(self) -> None:
        """Persist index + ledger states covering the applied journal position, then delete the
        journal files wholly before it. Order matters for crash safety: entry logs fsynced ->
        ledger files -> manifest -> journal deletion."""
        entry_logs = self._logs
        with self._checkpoint_lock:
            started = time.perf_counter()
            with self._lock:
                position = self._applied_pos
                dirty, self._dirty = self._dirty, set()
                if not dirty and position == self._checkpointed_pos:
                    return
                snapshots = [(key, encode_ledger(key, self._ledgers[key])) for key in dirty]
            try:
                entry_logs.sync()
                if self._index_store is None:
                    raise InvariantError("checkpoint before recovery opened the index store")
                write_ledger_snapshots(self._index_store, snapshots)
                write_manifest(self._data_dir, position, self._config.fsync)
            except BaseException:
                with self._lock:
                    self._dirty |= dirty
                raise
            self._checkpointed_pos = position
            deleted = delete_journal_files_before(self._journal_dir, position.seq)
            elapsed = time.perf_counter() - started
            self._stats.checkpoints += 1
            self._stats.checkpoint_ledgers_written += len(snapshots)
            self._stats.checkpoint_latency.record(elapsed)
            log.debug("checkpoint done position=%s ledgers_written=%d journal_files_deleted=%d "
                      "seconds=%.3f", tuple(position), len(snapshots), deleted, elapsed)
