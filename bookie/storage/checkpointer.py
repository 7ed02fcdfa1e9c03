"""The storage engine's checkpoint: make the applied part of the journal redundant (entry logs
fsynced, changed ledgers' snapshots written, manifest pointing past them), then trim the
journal. Runs on its own thread every checkpoint_interval_s, and on demand (GC, close)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bookie.storage.applier import Applier
from bookie.storage.checkpoint import MANIFEST_NAME, read_manifest, write_manifest
from bookie.storage.config import CLOSE_TIMEOUT_S
from bookie.storage.durable_files import TMP_SUFFIX
from bookie.storage.entry_log import EntryLogs
from bookie.storage.journal import JournalPosition
from bookie.storage.journal_pipeline import JournalPipeline
from bookie.storage.ledger_table import LedgerTable
from bookie.storage.stats import StorageStats

log = logging.getLogger(__name__)


def manifest_position(data_dir: Path) -> JournalPosition:
    """Where replay starts: the journal position the last checkpoint covered."""
    (data_dir / (MANIFEST_NAME + TMP_SUFFIX)).unlink(missing_ok=True)  # a torn manifest write
    return read_manifest(data_dir) or JournalPosition(0, 0)


class Checkpointer:
    def __init__(self, data_dir: Path, table: LedgerTable, logs: EntryLogs, applier: Applier,
                 journal: JournalPipeline, stats: StorageStats, fsync: bool) -> None:
        self._data_dir = data_dir
        self._table = table
        self._logs = logs
        self._applier = applier
        self._journal = journal
        self._stats = stats
        self._fsync = fsync
        self._lock = threading.Lock()  # one checkpoint at a time; held while the journal is replaced
        self._done: JournalPosition | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, interval_s: float) -> None:
        if interval_s > 0:
            self._thread = threading.Thread(target=self._loop, args=(interval_s,),
                                            name="bookie-checkpoint", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(CLOSE_TIMEOUT_S)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No checkpoint runs inside (the journal file is being replaced)."""
        with self._lock:
            yield

    def _loop(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            try:
                self.checkpoint()
            except Exception:
                log.exception("checkpoint failed data_dir=%s; will retry", self._data_dir)

    def checkpoint(self) -> None:
        """Persist index + ledger states covering the applied journal position, then delete the
        journal files wholly before it. Order matters for crash safety: entry logs fsynced ->
        ledger snapshots -> manifest -> journal deletion."""
        with self._lock:
            started = time.perf_counter()
            # The position first, then the ledgers changed up to (at least) it.
            position = self._applier.applied_position()
            dirty, snapshots = self._table.take_dirty()
            if not dirty and position == self._done:
                return
            try:
                self._logs.sync()
                self._table.write_snapshots(snapshots)
                write_manifest(self._data_dir, position, self._fsync)
            except BaseException:
                self._table.restore_dirty(dirty)
                raise
            self._done = position
            elapsed = time.perf_counter() - started
            # Counted before the trim: whoever sees the journal trimmed sees the checkpoint counted.
            self._stats.checkpoints += 1
            self._stats.checkpoint_ledgers_written += len(snapshots)
            self._stats.checkpoint_latency.record(elapsed)
            deleted = self._journal.trim_before(position.seq)
            log.debug("checkpoint done position=%s ledgers_written=%d journal_files_deleted=%d "
                      "seconds=%.3f", tuple(position), len(snapshots), deleted, elapsed)
