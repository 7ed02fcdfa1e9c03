"""BookieStorage: the durable storage engine of a bookie.

Data directory layout:
    LOCK                      flock'ed while an engine has the directory open
    CHECKPOINT                manifest: the journal position the checkpoint covers
    UNCERTAIN                 present while in uncertain mode (after a repaired journal)
    journal/<seq>.log         group-committed journal (the only thing an ack waits for)
    entries/<id>.log          entry logs (entries appended after the journal made them durable)
    ledgers/index.sqlite      index store: per-ledger master key, fence bit, LAC, index

Write path: add_batch validates and encodes on the caller's thread, reserves pending bytes
(BUSY after add_enqueue_timeout_ms), and queues one record per batch. The journal thread
writes a whole group with one write + one fdatasync; the apply thread then appends the group's
entries to the entry log with one pwrite, updates the index, and only then calls on_done(OK):
an acknowledged entry is always readable (group_commit.py).

Restart: load the ledger snapshots, replay the journal from the manifest position (re-appending entries
to a new entry log), open a new journal file, checkpoint, and trim the journal.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bookie.status import Status
from bookie.storage import records
from bookie.storage.checkpoint import MANIFEST_NAME, load_ledger_snapshots, read_manifest
from bookie.storage.config import (
    CLOSE_TIMEOUT_S,
    ENTRY_ID_MAX,
    LAC_NONE,
    MASTER_KEY_BYTES_MAX,
    StorageConfig,
)
from bookie.storage.durable_files import TMP_SUFFIX, remove_tmp_files
from bookie.storage.engine_apply import ApplyMixin
from bookie.storage.engine_checkpoint import CheckpointMixin
from bookie.storage.engine_compaction import CompactionMixin
from bookie.storage.engine_gc import GcMixin
from bookie.storage.engine_modes import UNCERTAIN_MARKER_NAME, ModesMixin
from bookie.storage.engine_reads import ReadPathMixin
from bookie.storage.engine_scrub import ScrubMixin
from bookie.storage.engine_types import (  # noqa: F401 - re-exported
    LedgerKey,
    LedgerState,
    ReadResult,
    _LacWaiters,
    _locations,
    _normalize_key,
    _results,
    _valid_ledger,
    _Waiter,
)
from bookie.storage.entry_log import EntryLogs
from bookie.storage.errors import InvariantError, StorageLockedError
from bookie.storage.group_commit import (
    KIND_ADD,
    KIND_CONTROL,
    KIND_LAC,
    GroupCommitter,
    JournalItem,
    JournalQueue,
)
from bookie.storage.index_store import IndexStore
from bookie.storage.journal import (
    JournalPosition,
    JournalWriter,
    list_journal_seqs,
    replay_journal,
)
from bookie.storage.ledger_index import LedgerMeta
from bookie.storage.stats import StorageStats

log = logging.getLogger(__name__)


LOCK_NAME = "LOCK"
JOURNAL_DIR = "journal"
ENTRIES_DIR = "entries"
LEDGERS_DIR = "ledgers"

# write_lac and delete_ledger wait at most this long for their journal record to be durable.
CONTROL_DURABLE_TIMEOUT_S = 10.0
# Upper bound on fence()'s caller-supplied timeout.
FENCE_TIMEOUT_MAX_S = 60.0
# The MASTER_KEY record that may precede a new ledger's first batch; counted in its reservation.
MASTER_KEY_RECORD_BYTES_MAX = (
    records.RECORD_HEADER_BYTES + records.MASTER_KEY_RECORD.size + MASTER_KEY_BYTES_MAX
)


class BookieStorage(ApplyMixin, ReadPathMixin, ModesMixin, CheckpointMixin, GcMixin,
                    CompactionMixin, ScrubMixin):
    """Thread-safe: every public method may be called from any thread."""

    def __init__(self, config: StorageConfig, lock_fd: int) -> None:
        # Use BookieStorage.open(); the constructor only wires fields.
        self._config = config
        self._data_dir = Path(config.data_dir)
        self._journal_dir = self._data_dir / JOURNAL_DIR
        self._entries_dir = self._data_dir / ENTRIES_DIR
        self._ledgers_dir = self._data_dir / LEDGERS_DIR
        self._index_store: IndexStore | None = None  # opened by _recover
        self._lock_fd = lock_fd
        # Guards _ledgers, their indexes, _dirty, _applied_pos, flags and read-side stats.
        self._lock = threading.Lock()
        self._checkpoint_lock = threading.Lock()
        self._ledgers: dict[LedgerKey, LedgerMeta] = {}
        self._dirty: set[LedgerKey] = set()
        self._lac_waiters: dict[LedgerKey, _LacWaiters] = {}
        self._stats = StorageStats()
        self._queue = JournalQueue(config.max_pending_add_bytes)
        self._entry_logs: EntryLogs | None = None
        self._writer: JournalWriter | None = None
        self._committer: GroupCommitter | None = None
        self._applied_pos = JournalPosition(0, 0)
        self._checkpointed_pos: JournalPosition | None = None
        self._uncertain = False
        self._read_only = False
        self._closed = False
        self._failed = False  # the journal failed: read-only until reopen_journal() or a restart
        self._failure: BaseException | None = None
        self._failure_listeners: list[Callable[[BaseException], None]] = []
        self._reads_inflight = 0
        self._corrupt_log_next = 0.0
        self._corrupt_log_suppressed = 0
        self._reads_drained = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._checkpoint_thread: threading.Thread | None = None

    # ---- lifecycle ----------------------------------------------------------------------

    @classmethod
    def open(cls, config: StorageConfig) -> BookieStorage:
        """Recover the data directory (checkpoint + journal replay) and start the threads."""
        config.validate()
        data_dir = Path(config.data_dir)
        for d in (data_dir, data_dir / JOURNAL_DIR, data_dir / ENTRIES_DIR, data_dir / LEDGERS_DIR):
            d.mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(data_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(lock_fd)
            raise StorageLockedError(f"data directory {data_dir} is in use by another engine") from exc
        engine = cls(config, lock_fd)
        try:
            engine._recover()
            engine._start()
        except BaseException:
            engine._release_resources()
            raise
        return engine

    def _recover(self) -> None:
        started = time.perf_counter()
        cfg = self._config
        # Leftovers of atomic writes a crash interrupted. Only our own names: the data dir is
        # shared with other files (the bookie's cookie).
        for name in (MANIFEST_NAME, UNCERTAIN_MARKER_NAME):
            (self._data_dir / (name + TMP_SUFFIX)).unlink(missing_ok=True)
        remove_tmp_files(self._ledgers_dir)
        start = read_manifest(self._data_dir) or JournalPosition(0, 0)
        self._index_store = IndexStore(self._ledgers_dir, cfg.fsync)
        for loaded in load_ledger_snapshots(self._index_store, self._ledgers_dir, cfg.fsync):
            self._ledgers[loaded.key] = loaded.meta
        self._entry_logs = EntryLogs(self._entries_dir, cfg.entry_log_max_bytes, cfg.fsync)
        self._uncertain = (self._data_dir / UNCERTAIN_MARKER_NAME).exists()
        if self._uncertain:
            log.error("opening in uncertain mode data_dir=%s (marker %s present; clear it with "
                      "clear_uncertain() once this bookie's ledgers are re-replicated)",
                      self._data_dir, UNCERTAIN_MARKER_NAME)
        outcome = replay_journal(self._journal_dir, start, cfg.repair_journal, cfg.fsync,
                                 self._replay_record)
        if outcome.skipped:
            self._enter_uncertain(f"journal repaired, skipped records: {', '.join(outcome.skipped)}")
        new_seq = max(outcome.last_seq, start.seq) + 1
        self._writer = JournalWriter(self._journal_dir, new_seq, cfg.journal_file_max_bytes, cfg.fsync)
        self._applied_pos = self._writer.position
        # Persist what replay rebuilt (and fsync the entries it re-appended) so the replayed
        # journal files, including any torn or repaired spots, can be deleted now.
        # Entry logs nothing points into (a crash during GC) are removed with it.
        self.reclaim_entry_logs()
        log.info(
            "storage opened data_dir=%s ledgers=%d replayed_records=%d from=%s truncated=%d "
            "skipped=%d uncertain=%s seconds=%.3f",
            self._data_dir, len(self._ledgers), outcome.records, tuple(start),
            len(outcome.truncated), len(outcome.skipped), self._uncertain,
            time.perf_counter() - started,
        )

    def _start(self) -> None:
        cfg = self._config
        self._start_committer()
        if cfg.checkpoint_interval_s > 0:
            self._checkpoint_thread = threading.Thread(
                target=self._checkpoint_loop, name="bookie-checkpoint", daemon=True)
            self._checkpoint_thread.start()

    def _start_committer(self) -> None:
        cfg = self._config
        self._committer = GroupCommitter(
            self._queue, self._journal_writer, self._apply_group, self._stats,
            cfg.journal_max_group_bytes, cfg.journal_max_group_wait_ms / 1000.0,
            self._on_journal_failure,
        )
        self._committer.start()

    def close(self) -> None:
        """Drain the journal, checkpoint, stop the threads, release the directory. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for waiters in self._lac_waiters.values():
                waiters.cond.notify_all()
        self._stop.set()
        if self._checkpoint_thread is not None:
            self._checkpoint_thread.join(CLOSE_TIMEOUT_S)
        self._queue.close()
        drained = self._committer.join(CLOSE_TIMEOUT_S) if self._committer else True
        if not drained:
            log.error("journal thread did not stop within %.0fs; skipping final checkpoint",
                      CLOSE_TIMEOUT_S)
        elif not self._failed:
            try:
                self.checkpoint()
            except Exception:  # one listener must not keep the others from hearing it
                log.exception("final checkpoint failed data_dir=%s; the journal will be replayed",
                              self._data_dir)
        with self._lock:
            if not self._reads_drained.wait_for(lambda: self._reads_inflight == 0, CLOSE_TIMEOUT_S):
                log.error("reads still in flight at close count=%d", self._reads_inflight)
        self._release_resources()
        log.info("storage closed data_dir=%s", self._data_dir)

    def _release_resources(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._entry_logs is not None:
            self._entry_logs.close()
        if self._index_store is not None:
            self._index_store.close()
            self._index_store = None
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # also drops the flock
            self._lock_fd = -1

    def _on_journal_failure(self, error: BaseException) -> None:
        with self._lock:
            first = not self._failed
            self._failed = True
            self._failure = self._failure or error
            listeners = list(self._failure_listeners) if first else []
        if first:
            log.error("journal failed: read-only (adds refused, reads served) until reopened data_dir=%s "
                      "error=%r", self._data_dir, error)
        for callback in listeners:
            try:
                callback(error)
            except Exception:
                log.exception("journal failure listener raised")

    def on_journal_failure(self, callback: Callable[[BaseException], None]) -> None:
        """Call `callback(error)` when the journal fails (at once if it has already failed), so
        the bookie can stop advertising itself writable."""
        with self._lock:
            failure = self._failure
            if failure is None:
                self._failure_listeners.append(callback)
        if failure is not None:
            callback(failure)

    def reopen_journal(self) -> bool:
        """Hook for bookie.writable_again, once the disk has room again: replace a failed journal
        with a new file and take adds again, without a restart. Every acknowledged record was
        applied before its ack, so a checkpoint at the new file's start covers them all; the
        failed file (its tail unknown after the error, maybe holding records nobody was told
        are durable) is then never replayed and is deleted. False (still failed) if any step
        fails; it may be called again."""
        if not self._failed or self._closed:
            return not self._failed
        old = self._committer
        if old is not None and not old.join(CLOSE_TIMEOUT_S):
            return False  # the failed committer still drains its queue: try again later
        try:
            with self._checkpoint_lock:
                self._journal_writer.close()
                self._logs.roll()  # a fresh entry log: the failed one may end in a torn append
                seq = max([self._journal_writer.position.seq, *list_journal_seqs(self._journal_dir)]) + 1
                self._writer = JournalWriter(self._journal_dir, seq,
                                             self._config.journal_file_max_bytes, self._config.fsync)
                with self._lock:
                    self._applied_pos = self._writer.position
            self.checkpoint()  # manifest -> the new file; deletes the failed one
        except OSError as e:
            log.warning("journal reopen failed, staying read-only data_dir=%s error=%r", self._data_dir, e)
            return False
        self._queue.reopen()
        with self._lock:
            self._start_committer()
            self._failed, self._failure = False, None
        log.info("journal reopened after a failure: adds accepted again data_dir=%s journal=%s",
                    self._data_dir, tuple(self._writer.position))
        return True

    @property
    def _logs(self) -> EntryLogs:
        if self._entry_logs is None:
            raise InvariantError("entry logs used before recovery opened them")
        return self._entry_logs

    @property
    def _journal_writer(self) -> JournalWriter:
        if self._writer is None:
            raise InvariantError("journal used before recovery opened it")
        return self._writer

    # ---- write path ---------------------------------------------------------------------

    def _write_refusal(self, allowed_when_read_only: bool) -> Status | None:
        if self._closed:
            return Status.INTERNAL_ERROR
        if self._failed:
            return Status.READ_ONLY  # recovery writes too: the journal takes nothing any more
        if self._read_only and not allowed_when_read_only:
            return Status.READ_ONLY
        return None

    def add_batch(
        self,
        ledger: LedgerKey,
        master_key: bytes,
        entries: Sequence[tuple[int, int, bytes]],
        recovery: bool,
        on_done: Callable[[Status], None],
        allow_inline: bool = True,
    ) -> None:
        """Validate synchronously (on_done called at once with the refusal), otherwise queue;
        on_done(OK) comes from the journal thread once the batch is durable and readable. With
        `allow_inline`, an add that finds the journal idle is written, synced and applied in the
        calling thread instead (on_done runs before this returns); callers submitting several
        batches at once pass False so they share one group commit.
        Recovery adds are accepted on fenced ledgers and, like BookKeeper's high-priority
        writes, on a read-only bookie."""
        refusal = self._write_refusal(allowed_when_read_only=recovery)
        if refusal is not None:
            on_done(refusal)
            return
        key = _normalize_key(master_key)
        if key is None or not _valid_ledger(ledger):
            on_done(Status.INVALID_REQUEST)
            return
        cfg = self._config
        try:
            batch = records.encode_add_batch(ledger[0], ledger[1], entries,
                                             cfg.max_entry_size_bytes, ENTRY_ID_MAX)
        except records.BatchRejected as e:
            log.debug("add rejected ledger=%s reason=%s", ledger, e)
            on_done(Status.TOO_LARGE if e.too_large else Status.INVALID_REQUEST)
            return
        reserved = batch.record_bytes + MASTER_KEY_RECORD_BYTES_MAX
        if reserved > self._queue.pending_bytes_max:
            on_done(Status.TOO_LARGE)
            return
        if not self._queue.reserve(reserved, cfg.add_enqueue_timeout_ms / 1000.0):
            with self._lock:
                self._stats.busy_rejections += 1
            on_done(Status.BUSY)
            return
        inline: JournalItem | None = None
        with self._lock:
            meta, status, key_record = self._meta_for_write(ledger, key)
            if meta is not None and meta.fenced and not recovery:
                status = Status.FENCED
            if status is None:
                item = JournalItem(key_record + batch.parts, KIND_ADD, ledger, batch, on_done, reserved)
                # Claimed under this lock, so a fence that follows is journaled after this add.
                if allow_inline and self._committer is not None and self._committer.claim_inline():
                    inline = item
                elif not self._queue.push(item):
                    status = Status.INTERNAL_ERROR
        if inline is not None:
            self._committer.commit_claimed(inline)  # type: ignore[union-attr]  # claimed above: not None
            return
        if status is not None:
            self._queue.release(reserved)
            log.debug("add refused ledger=%s status=%s", ledger, status.name)
            on_done(status)

    def _meta_for_write(self, ledger: LedgerKey, key: bytes
                        ) -> tuple[LedgerMeta | None, Status | None, tuple[bytes, ...]]:
        """Under the lock: the state a write with `key` applies to, created for an unseen
        ledger. Returns (state, refusal, records to journal first): a new ledger's key is
        journaled (MASTER_KEY) ahead of the write, in the same item, so replay sees it first."""
        meta = self._ledgers.get(ledger)
        if meta is None:
            meta = self._ledgers[ledger] = LedgerMeta(key)
        elif meta.deleted:
            return None, Status.NO_SUCH_LEDGER, ()
        elif meta.key is None:  # known only from a replayed record that carried no key
            meta.key = key
        elif meta.key != key:
            return None, Status.UNAUTHORIZED, ()
        else:
            return meta, None, ()
        self._dirty.add(ledger)
        return meta, None, records.encode_master_key(ledger[0], ledger[1], key)

    def fence(self, ledger: LedgerKey, master_key: bytes, timeout_s: float = 10.0) -> tuple[Status, int]:
        """Fence the ledger (creating its state if unseen); returns once the FENCE record is
        durable, with the LAC. Allowed on a read-only bookie (it only helps recovery)."""
        refusal = self._write_refusal(allowed_when_read_only=True)
        if refusal is not None:
            return refusal, LAC_NONE
        key = _normalize_key(master_key)
        if key is None or not _valid_ledger(ledger):
            return Status.INVALID_REQUEST, LAC_NONE
        waiter = _Waiter()
        with self._lock:
            meta, status, key_record = self._meta_for_write(ledger, key)
            if meta is None or status is not None:
                return status or Status.INTERNAL_ERROR, LAC_NONE
            if not meta.fenced:
                log.info("fencing ledger=%s lac=%d", ledger, meta.lac)
            # Set now so adds queued after this call are refused; durable below before we return.
            meta.fenced = True
            self._dirty.add(ledger)
            parts = key_record + records.encode_fence(ledger[0], ledger[1])
            if not self._queue.push(JournalItem(parts, KIND_CONTROL, ledger, None, waiter)):
                return Status.INTERNAL_ERROR, LAC_NONE
        status = waiter.wait(min(max(timeout_s, 0.0), FENCE_TIMEOUT_MAX_S))
        if status != Status.OK:
            log.warning("fence not durable ledger=%s status=%s", ledger, status.name)
            return status, LAC_NONE
        with self._lock:
            return Status.OK, meta.lac

    def write_lac(self, ledger: LedgerKey, master_key: bytes, lac: int) -> Status:
        """Journal an explicit LAC (durable before return). Creates an unseen ledger, like an
        add; refused with FENCED on a fenced ledger (a fenced writer has nothing to confirm)."""
        refusal = self._write_refusal(allowed_when_read_only=False)
        if refusal is not None:
            return refusal
        key = _normalize_key(master_key)
        if (key is None or not _valid_ledger(ledger) or not isinstance(lac, int)
                or not LAC_NONE <= lac <= ENTRY_ID_MAX):
            return Status.INVALID_REQUEST
        waiter = _Waiter()
        with self._lock:
            meta, status, key_record = self._meta_for_write(ledger, key)
            if meta is None or status is not None:
                return status or Status.INTERNAL_ERROR
            if meta.fenced:
                return Status.FENCED
            parts = key_record + records.encode_explicit_lac(ledger[0], ledger[1], lac)
            if not self._queue.push(JournalItem(parts, KIND_LAC, ledger, lac, waiter)):
                return Status.INTERNAL_ERROR
        return waiter.wait(CONTROL_DURABLE_TIMEOUT_S)

    def delete_ledger(self, ledger: LedgerKey) -> Status:
        """Delete (durable before return). The ledger stays a tombstone so it never comes back:
        later adds and fences get NO_SUCH_LEDGER. Deleting it again is OK (idempotent)."""
        refusal = self._write_refusal(allowed_when_read_only=True)
        if refusal is not None:
            return refusal
        if not _valid_ledger(ledger):
            return Status.INVALID_REQUEST
        waiter = _Waiter()
        with self._lock:
            meta = self._ledgers.get(ledger)
            if meta is None:
                return Status.NO_SUCH_LEDGER
            if meta.deleted:
                return Status.OK
            meta.mark_deleted()
            self._dirty.add(ledger)
            waiters = self._lac_waiters.get(ledger)
            if waiters is not None:
                waiters.cond.notify_all()
            if not self._queue.push(JournalItem(records.encode_delete(ledger[0], ledger[1]),
                                                KIND_CONTROL, ledger, None, waiter)):
                return Status.INTERNAL_ERROR
        log.info("ledger deleted ledger=%s", ledger)
        return waiter.wait(CONTROL_DURABLE_TIMEOUT_S)

