"""BookieStorage: the durable storage engine of a bookie, as a small facade over its parts.

Directory layout (the journal directory is StorageConfig.data_dir; with no ledger directories
given, entries/ is under it too, as in a single --data-dir):
    LOCK                      flock'ed while an engine has the directory open
    FORMAT_VERSION            on-disk format marker, once a format above 1 is written (format_version.py;
                              in each ledger directory too)
    CHECKPOINT                manifest: the journal position the checkpoint covers
    UNCERTAIN                 present while in uncertain mode (after a repaired journal)
    journal/<seq>.log         group-committed journal (the only thing an ack waits for)
    ledgers/index.sqlite      index store: per-ledger master key, fence bit, LAC, index
    <ledger dir>/entries/<id>.log   entry logs (appended after the journal made them durable)

The index lives with the journal, not with the entry logs: when a ledger directory is lost, the
index still says which entries were there (their locations name entry logs that are gone), so
the bookie answers UNKNOWN_ENTRY_STATE for them and reports the ledgers (lost_ledgers()).

The parts (docs/storage.md lists them): JournalPipeline, EntryLogs, LedgerTable (the index),
Applier, WritePath, ReadPath, EngineModes, Checkpointer, EntryLogGc, Compactor, EntryScrubber;
each owns its state, this facade wires them and hands each public call to its part.

Write path: an add is journaled (one write + one fdatasync per group), then applied (entry log
pwrite, index) and only then acknowledged: an acknowledged entry is always readable.
Restart: load the ledger snapshots, replay the journal from the manifest position (re-appending
entries to a new entry log), open a new journal file, checkpoint, and trim the journal.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bookie.status import Status
from bookie.storage.applier import Applier
from bookie.storage.checkpointer import Checkpointer, manifest_position
from bookie.storage.compactor import Compactor
from bookie.storage.config import CLOSE_TIMEOUT_S, StorageConfig
from bookie.storage.engine_scrub import EntryScrubber, ScrubWindow
from bookie.storage.engine_types import LedgerKey, LedgerState, ReadResult
from bookie.storage.entry_log import EntryLogs
from bookie.storage.entry_log_gc import EntryLogGc
from bookie.storage.errors import StorageLockedError
from bookie.storage.format_version import FormatState
from bookie.storage.group_commit import GroupCommitter
from bookie.storage.journal_pipeline import JournalPipeline
from bookie.storage.ledger_index import LedgerMeta
from bookie.storage.ledger_table import LedgerTable
from bookie.storage.modes import EngineModes
from bookie.storage.range_read import RangeRead
from bookie.storage.read_path import ReadPath
from bookie.storage.stats import StorageStats
from bookie.storage.write_path import WritePath

__all__ = ["BookieStorage", "LedgerKey", "LedgerState", "ReadResult"]

log = logging.getLogger(__name__)

LOCK_NAME = "LOCK"
JOURNAL_DIR = "journal"
ENTRIES_DIR = "entries"
LEDGERS_DIR = "ledgers"


class BookieStorage:
    """Thread-safe: every public method may be called from any thread."""

    def __init__(self, config: StorageConfig, lock_fd: int, table: LedgerTable, logs: EntryLogs,
                 fmt: FormatState) -> None:
        # Use BookieStorage.open(): it opens the table and the logs; this only wires the parts.
        self._format = fmt
        self._config = config
        self._data_dir = Path(config.data_dir)
        self._lock_fd = lock_fd
        self._stats = StorageStats()
        self._table = table
        self._logs = logs
        self._modes = EngineModes(self._data_dir)
        self._journal = JournalPipeline(self._data_dir / JOURNAL_DIR, config, self._stats)
        self._applier = Applier(table, logs)
        self._reads = ReadPath(table, logs, self._modes, self._stats)
        self._writes = WritePath(config, table, self._journal, self._modes, self._stats, fmt)
        self._checkpointer = Checkpointer(self._data_dir, table, logs, self._applier, self._journal,
                                          self._stats, config.fsync)
        self._gc = EntryLogGc(table, logs, self._reads, self._checkpointer.checkpoint)
        self._compactor = Compactor(table, logs, self._gc.entry_log_usage, config.entry_log_max_bytes,
                                    config.fsync)
        self._scrubber = EntryScrubber(table, self._reads)
        self._lost: dict[LedgerKey, int] = {}  # ledger -> entries lost with a ledger directory

    # ---- lifecycle ----------------------------------------------------------------------

    @classmethod
    def open(cls, config: StorageConfig) -> BookieStorage:
        """Recover the data directory (checkpoint + journal replay) and start the threads."""
        config.validate()
        data_dir = Path(config.data_dir)
        for d in (data_dir, data_dir / JOURNAL_DIR, data_dir / LEDGERS_DIR):
            d.mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(data_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(lock_fd)
            raise StorageLockedError(f"data directory {data_dir} is in use by another engine") from exc
        with ExitStack() as undo:  # on any failure: close what was opened, newest first
            undo.callback(os.close, lock_fd)  # also drops the flock
            # Refuses a newer format before reading anything; markers in the journal directory and
            # in every ledger directory usable now (a missing one is recreated empty, unmarked).
            fmt = FormatState([data_dir, *(d for d in config.entry_log_parents if d != data_dir and d.is_dir())],
                              config.fsync)
            table = LedgerTable.load(data_dir / LEDGERS_DIR, config.fsync)
            undo.callback(table.close)
            referenced = table.referenced_log_ids()
            logs = EntryLogs([d / ENTRIES_DIR for d in config.entry_log_parents], config.entry_log_max_bytes,
                             config.fsync, max(referenced, default=0), config.entry_log_cache_window_bytes)
            undo.callback(logs.close)
            engine = cls(config, lock_fd, table, logs, fmt)
            undo.callback(engine._journal.close)
            engine._recover(referenced - logs.existing_ids())
            engine._journal.start(engine._applier.apply_group, engine._modes.journal_failed)
            engine._checkpointer.start(config.checkpoint_interval_s)
            undo.pop_all()
        return engine

    def _recover(self, missing_logs: set[int]) -> None:
        started = time.perf_counter()
        start = manifest_position(self._data_dir)
        outcome = self._journal.replay(start, self._applier.replay_record)
        if outcome.skipped:
            self._modes.enter_uncertain(f"journal repaired, skipped records: {', '.join(outcome.skipped)}")
        self._applier.reset_position(self._journal.position)
        if missing_logs:
            # After replay: entries the journal still held were re-appended, so they are not lost.
            self._lost = self._table.entries_in_logs(missing_logs)
            self._reads.lost_log_ids = frozenset(missing_logs)
            log.warning("entry logs missing (a wiped or failed ledger directory): their entries answer UNKNOWN_ENTRY_"
                        "STATE until re-replicated logs=%d ledgers=%d entries=%d", len(missing_logs), len(self._lost),
                        sum(self._lost.values()))
        # Persist what replay rebuilt (and fsync the entries it re-appended) so the replayed
        # journal files, including any torn or repaired spots, can be deleted now.
        # Entry logs nothing points into (a crash during GC) are removed with it.
        self.reclaim_entry_logs()
        log.info(
            "storage opened data_dir=%s ledgers=%d replayed_records=%d from=%s truncated=%d "
            "skipped=%d uncertain=%s seconds=%.3f",
            self._data_dir, len(self._table.metas), outcome.records, tuple(start),
            len(outcome.truncated), len(outcome.skipped), self._modes.uncertain,
            time.perf_counter() - started,
        )

    def close(self) -> None:
        """Drain the journal, checkpoint, stop the threads, release the directory. Idempotent."""
        if not self._table.close_requests():
            return
        self._checkpointer.stop()
        if not self._journal.stop():
            log.error("journal thread did not stop within %.0fs; skipping final checkpoint",
                      CLOSE_TIMEOUT_S)
        elif not self._modes.failed:
            try:
                self.checkpoint()
            except Exception:
                log.exception("final checkpoint failed data_dir=%s; the journal will be replayed",
                              self._data_dir)
        if self._reads.when_idle(lambda: True, CLOSE_TIMEOUT_S) is None:
            log.error("reads still in flight at close data_dir=%s", self._data_dir)
        self._journal.close()
        self._logs.close()
        self._table.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # also drops the flock
            self._lock_fd = -1
        log.info("storage closed data_dir=%s", self._data_dir)

    def on_journal_failure(self, callback: Callable[[BaseException], None]) -> None:
        """Call `callback(error)` when the journal fails (at once if it already has)."""
        self._modes.on_journal_failure(callback)

    def reopen_journal(self) -> bool:
        """bookie.writable_again's hook: replace a failed journal by a new file, without a
        restart (docs/operations.md). Acknowledged records were applied before their acks, so a
        checkpoint at the new file's start covers them; the failed file is never replayed.
        False (still failed) if a step fails; it may be called again."""
        if not self._modes.failed or self._table.closed:
            return not self._modes.failed
        if not self._journal.committer_stopped():
            return False  # the failed committer still drains its queue: try again later
        try:
            with self._checkpointer.paused():
                self._logs.roll()  # a fresh entry log: the failed one may end in a torn append
                self._applier.reset_position(self._journal.replace_file())
            self.checkpoint()  # manifest -> the new file; deletes the failed one
        except OSError as e:
            log.warning("journal reopen failed, staying read-only data_dir=%s error=%r", self._data_dir, e)
            return False
        with self._table.lock:  # ordered against adds claiming the journal
            self._journal.restart(self._applier.apply_group, self._modes.journal_failed)
            self._modes.journal_reopened()
        log.info("journal reopened after a failure: adds accepted again data_dir=%s journal=%s",
                 self._data_dir, tuple(self._journal.position))
        return True

    # ---- writes (write_path.py) ---------------------------------------------------------

    def add_batch(self, ledger: LedgerKey, master_key: bytes, entries: Sequence[tuple[int, int, bytes | memoryview]],
                  recovery: bool, on_done: Callable[[Status], None], allow_inline: bool = True) -> None:
        """Refusals call on_done at once; else on_done(OK) once the batch is durable and
        readable (WritePath.add_batch says on which thread)."""
        self._writes.add_batch(ledger, master_key, entries, recovery, on_done, allow_inline)

    def fence(self, ledger: LedgerKey, master_key: bytes, timeout_s: float = 10.0) -> tuple[Status, int]:
        """Fence the ledger (creating its state if unseen); returns once the FENCE record is
        durable, with the LAC. Allowed on a read-only bookie (it only helps recovery)."""
        return self._writes.fence(ledger, master_key, timeout_s)

    def write_lac(self, ledger: LedgerKey, master_key: bytes, lac: int) -> Status:
        """Journal an explicit LAC (durable before return). Creates an unseen ledger, like an
        add; refused with FENCED on a fenced ledger (a fenced writer has nothing to confirm)."""
        return self._writes.write_lac(ledger, master_key, lac)

    def delete_ledger(self, ledger: LedgerKey) -> Status:
        """Delete (durable before return). The ledger stays a tombstone so it never comes back:
        later adds and fences get NO_SUCH_LEDGER. Deleting it again is OK (idempotent)."""
        return self._writes.delete_ledger(ledger)

    # ---- reads (read_path.py) -----------------------------------------------------------

    def read_lac(self, ledger: LedgerKey) -> tuple[Status, int]:
        return self._reads.read_lac(ledger)

    def wait_lac(self, ledger: LedgerKey, min_lac: int, timeout_s: float) -> tuple[Status, int]:
        """Long poll: return as soon as LAC >= min_lac, or at the timeout with the current LAC."""
        return self._reads.wait_lac(ledger, min_lac, timeout_s)

    def read_entry(self, ledger: LedgerKey, entry_id: int) -> ReadResult:
        return self._reads.read_entry(ledger, entry_id)

    def read_range(self, ledger: LedgerKey, first: int, last: int, max_entries: int,
                   max_bytes: int) -> tuple[Status, list[ReadResult]]:
        return self._reads.read_range(ledger, first, last, max_entries, max_bytes)

    def read_runs(self, ledger: LedgerKey, first: int, last: int, max_entries: int,
                  max_bytes: int) -> tuple[Status, RangeRead | None]:
        return self._reads.read_runs(ledger, first, last, max_entries, max_bytes)

    # ---- introspection ------------------------------------------------------------------

    def ledgers(self) -> list[LedgerKey]:
        return [key for key, _ in self._table.live()]

    def ledger_state(self, ledger: LedgerKey) -> LedgerState | None:
        return self._table.state(ledger)

    def stored_master_key(self, ledger: LedgerKey) -> bytes | None:
        """The master key the ledger was created with, for authorizing requests that carry no
        write (bookie/auth.py); None: unknown, deleted, or known only from a keyless record."""
        return self._table.master_key(ledger)

    def stats(self) -> dict[str, Any]:
        position = self._applier.applied_position()
        queue, modes = self._journal.queue, self._modes
        with self._table.lock:
            out = self._stats.to_dict()
            out.update(
                pending_add_bytes=queue.pending_bytes,
                pending_add_bytes_max=queue.pending_bytes_max,
                ledgers=self._table.live_count_locked(),
                dirty_ledgers=self._table.dirty_count_locked(),
                applied_journal_position=tuple(position),
                uncertain=modes.uncertain,
                read_only=modes.read_only,
                failed=modes.failed,
                format_version=self._format.writes,
            )
        return out

    def disk_usage(self) -> tuple[int, int]:
        usage = shutil.disk_usage(self._data_dir)  # the journal directory's file system
        return usage.used, usage.total

    def set_write_format(self, setting: int) -> int:
        """Follow the cluster setting storage_format_version; the format written from now on
        (docs/upgrading.md, format_version.py)."""
        return self._format.follow(setting)

    # ---- ledger directories (entry_log.py) ----------------------------------------------

    @property
    def ledger_dirs(self) -> tuple[Path, ...]:
        """The directories entry logs live under (the journal directory when none was given)."""
        return self._config.entry_log_parents

    def lost_ledgers(self) -> dict[LedgerKey, int]:
        """Ledgers with entries in entry logs missing at open (a lost ledger directory), and how many."""
        return dict(self._lost)

    def set_ledger_dir_full(self, ledger_dir: Path, full: bool) -> None:
        """The disk monitor's verdict on one ledger directory: a full one takes no new entry log."""
        self._logs.set_full(ledger_dir / ENTRIES_DIR, full)

    def ledger_dirs_all_full(self) -> bool:
        return self._logs.all_full()

    def on_ledger_dir_full(self, callback: Callable[[Path], None]) -> None:
        """Call `callback(ledger_dir)` (apply thread: must not block) when ENOSPC fills a ledger dir."""
        self._logs.on_full = lambda entries_dir: callback(entries_dir.parent)

    # ---- modes (modes.py) ---------------------------------------------------------------

    @property
    def read_only(self) -> bool:
        """Refusing adds: the disk is full (set_read_only) or the journal failed."""
        return self._modes.read_only

    @property
    def journal_failed(self) -> bool:
        return self._modes.failed

    def set_read_only(self, read_only: bool) -> None:
        """The disk monitor's verdict. It never makes a bookie whose journal failed writable."""
        self._modes.set_disk_read_only(read_only)

    @property
    def uncertain(self) -> bool:
        return self._modes.uncertain

    def clear_uncertain(self) -> None:
        """Operator action, once this bookie's ledgers are known complete (re-replicated)."""
        self._modes.clear_uncertain()

    # ---- checkpoint, GC, compaction, scrub ----------------------------------------------

    def checkpoint(self) -> None:
        """Persist the index covering the applied journal position, then trim the journal."""
        self._checkpointer.checkpoint()

    def attach_gc(self, collector: Any) -> None:
        """The bookie's GarbageCollector (bookie/gc_service.start_gc), for the admin surface."""
        self._gc.attach(collector)

    def gc_stats(self) -> dict[str, Any]:
        """bookie/admin.py's GC figures (keys in docs/storage.md)."""
        return self._gc.stats()

    def run_gc_now(self, progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
        """`ledger triggergc`: one GC round and a major compaction now, with progress."""
        return self._gc.run_now(progress)

    def set_closed_last(self, ledger: LedgerKey, last_entry: int) -> None:
        """Metadata says CLOSED at last_entry: the dirty tail past it is never served again."""
        self._gc.set_closed_last(ledger, last_entry)

    def entry_log_usage(self) -> dict[int, tuple[int, int]]:
        """(file bytes, live bytes) per entry log."""
        return self._gc.entry_log_usage()

    def reclaim_entry_logs(self) -> int:
        """Checkpoint, then remove the entry logs nothing points into; the bytes freed."""
        return self._gc.reclaim()

    def compaction_candidates(self, threshold: float) -> dict[int, tuple[int, int]]:
        return self._compactor.candidates(threshold)

    def roll_dead_current_log(self, threshold: float) -> bool:
        return self._compactor.roll_dead_current(threshold)

    def compact_entry_logs(self, threshold: float, rate_bytes_s: float) -> tuple[int, int]:
        """Rewrite the logs under threshold; returns (logs compacted, net bytes reclaimed)."""
        return self._compactor.compact(threshold, rate_bytes_s, self.reclaim_entry_logs)

    def scrub_ledgers(self) -> list[LedgerKey]:
        return self._scrubber.ledgers()

    def scrub_window(self, ledger: LedgerKey, first: int, max_bytes: int) -> ScrubWindow:
        return self._scrubber.window(ledger, first, max_bytes)

    # ---- narrow accessors for tests that look inside (tests/bookie) ---------------------

    @property
    def _committer(self) -> GroupCommitter | None:
        return self._journal.committer

    @property
    def _ledgers(self) -> dict[LedgerKey, LedgerMeta]:
        return self._table.metas

    @property
    def _uncertain(self) -> bool:
        return self._modes.uncertain

    @_uncertain.setter
    def _uncertain(self, value: bool) -> None:
        self._modes.uncertain = value
