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
import shutil
import threading
import time
from array import array
from dataclasses import dataclass
from itertools import accumulate, islice
from pathlib import Path
from typing import Any, Callable, Sequence

from bookie.status import Status
from bookie.storage import records
from bookie.storage.checkpoint import (
    MANIFEST_NAME,
    encode_ledger,
    load_ledger_snapshots,
    read_manifest,
    write_ledger_snapshots,
    write_manifest,
)
from bookie.storage.config import (
    CLOSE_TIMEOUT_S,
    ENTRY_ID_MAX,
    LAC_NONE,
    LEDGER_ID_MAX,
    MASTER_KEY_BYTES_MAX,
    READ_RANGE_BYTES_MAX,
    READ_RANGE_ENTRIES_MAX,
    WAIT_LAC_TIMEOUT_MAX_S,
    StorageConfig,
)
from bookie.storage.durable_files import TMP_SUFFIX, atomic_write, fsync_dir, remove_tmp_files
from bookie.storage.entry_log import EntryLogs
from bookie.storage.errors import InvariantError, RecordFormatError, StorageLockedError
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
    delete_journal_files_before,
    list_journal_seqs,
    replay_journal,
)
from bookie.storage.ledger_index import (
    LedgerMeta,
    pack_location,
    unpack_location,
)
from bookie.storage.range_read import RangeRead, read_window
from bookie.storage.stats import StorageStats

log = logging.getLogger(__name__)

LedgerKey = tuple[int, int]

LOCK_NAME = "LOCK"
UNCERTAIN_MARKER_NAME = "UNCERTAIN"
JOURNAL_DIR = "journal"
ENTRIES_DIR = "entries"
LEDGERS_DIR = "ledgers"

# write_lac and delete_ledger wait at most this long for their journal record to be durable.
CONTROL_DURABLE_TIMEOUT_S = 10.0
# Corrupt entries found by reads are logged at most once per this interval.
CORRUPT_LOG_INTERVAL_S = 1.0
# Upper bound on fence()'s caller-supplied timeout.
FENCE_TIMEOUT_MAX_S = 60.0
# The MASTER_KEY record that may precede a new ledger's first batch; counted in its reservation.
MASTER_KEY_RECORD_BYTES_MAX = (
    records.RECORD_HEADER_BYTES + records.MASTER_KEY_RECORD.size + MASTER_KEY_BYTES_MAX
)



@dataclass(frozen=True, slots=True)
class ReadResult:
    entry_id: int
    status: Status  # OK, NO_SUCH_ENTRY, UNKNOWN_ENTRY_STATE (read_entry: also ledger statuses)
    data: bytes  # b"" unless OK


@dataclass(frozen=True)
class LedgerState:
    fenced: bool
    lac: int
    entry_count: int
    size_bytes: int
    has_master_key: bool


class _Waiter:
    """Completion of one synchronous journal write (fence, write_lac, delete)."""

    __slots__ = ("_event", "status")

    def __init__(self) -> None:
        self._event = threading.Event()
        self.status = Status.TIMEOUT

    def __call__(self, status: Status) -> None:
        self.status = status
        self._event.set()

    def wait(self, timeout_s: float) -> Status:
        return self.status if self._event.wait(timeout_s) else Status.TIMEOUT


class _LacWaiters:
    __slots__ = ("cond", "count")

    def __init__(self, lock: threading.Lock) -> None:
        self.cond = threading.Condition(lock)
        self.count = 0


def _valid_ledger(ledger: Any) -> bool:
    return (
        isinstance(ledger, tuple)
        and len(ledger) == 2
        and isinstance(ledger[0], int)
        and isinstance(ledger[1], int)
        and 0 <= ledger[0] <= LEDGER_ID_MAX
        and 0 <= ledger[1] <= LEDGER_ID_MAX
    )


def _normalize_key(master_key: Any) -> bytes | None:
    if not isinstance(master_key, (bytes, bytearray, memoryview)):
        return None
    key = bytes(master_key)
    return key if len(key) <= MASTER_KEY_BYTES_MAX else None


def _locations(log_id: int, region_offset: int,
               batch: records.EncodedBatch | records.DecodedBatch) -> array[int]:
    """Packed entry-log location of each entry of a batch written at region_offset."""
    # Entries are back to back: header k starts after headers and data of entries 0..k-1.
    # accumulate/map/islice run that running sum in C: this is the index's hot loop.
    steps = map(records.ENTRY_HEADER_BYTES.__add__, batch.lens)
    base = pack_location(log_id, region_offset)
    return array("q", islice(accumulate(steps, initial=base), len(batch.lens)))


def _results(answer: RangeRead) -> list[ReadResult]:
    """One ReadResult per id of a bulk answer, in id order (the per-entry form of a read)."""
    out: list[ReadResult] = [ReadResult(eid, status, b"") for eid, status in answer.others]
    for run in answer.runs:
        ends = list(accumulate(run.lengths, initial=0))
        data = run.data
        out.extend(ReadResult(run.first_entry_id + i, Status.OK, data[ends[i]:ends[i + 1]])
                   for i in range(run.count))
    out.sort(key=lambda r: r.entry_id)
    return out


class BookieStorage:
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
    def open(cls, config: StorageConfig) -> "BookieStorage":
        """Recover the data directory (checkpoint + journal replay) and start the threads."""
        config.validate()
        data_dir = Path(config.data_dir)
        for d in (data_dir, data_dir / JOURNAL_DIR, data_dir / ENTRIES_DIR, data_dir / LEDGERS_DIR):
            d.mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(data_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock_fd)
            raise StorageLockedError(f"data directory {data_dir} is in use by another engine")
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
        self.checkpoint()
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
            except Exception:
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
            except Exception:  # noqa: BLE001 - one listener must not keep the others from hearing it
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
        log.warning("journal reopened after a failure: adds accepted again data_dir=%s journal=%s",
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
            self._committer.commit_claimed(inline)  # type: ignore[union-attr]
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
                log.warning("fencing ledger=%s lac=%d", ledger, meta.lac)
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

    # ---- applying durable records (journal thread, and replay at open) ------------------

    def _apply_group(self, group: list[JournalItem], end: JournalPosition) -> None:
        adds = [item for item in group if item.kind == KIND_ADD]
        placements = self._logs.append_regions(
            [memoryview(item.payload.parts[1])[item.payload.region_offset:] for item in adds]
        ) if adds else []
        # Entry locations are computed before taking the lock: readers wait less.
        locations = [_locations(log_id, offset, item.payload)
                     for item, (log_id, offset) in zip(adds, placements)]
        with self._lock:
            next_add = 0
            for item in group:
                if item.kind == KIND_ADD:
                    locs = locations[next_add]
                    next_add += 1
                    meta = self._ledgers.get(item.ledger)
                    if meta is None or meta.deleted:
                        continue  # deleted while the add was in flight
                    self._index_batch(item.ledger, meta, locs, item.payload)
                elif item.kind == KIND_LAC:
                    meta = self._ledgers.get(item.ledger)
                    if meta is not None and not meta.deleted:
                        self._raise_lac(item.ledger, meta, item.payload)
            self._applied_pos = end

    def _index_batch(self, ledger: LedgerKey, meta: LedgerMeta, locs: array[int],
                     batch: records.EncodedBatch | records.DecodedBatch) -> None:
        meta.index.put_batch(batch.ids, locs, batch.lens, batch.contiguous, batch.data_bytes)
        self._dirty.add(ledger)
        self._raise_lac(ledger, meta, batch.max_lac)

    def _raise_lac(self, ledger: LedgerKey, meta: LedgerMeta, lac: int) -> None:
        if lac <= meta.lac:
            return
        meta.lac = lac
        self._dirty.add(ledger)
        waiters = self._lac_waiters.get(ledger)
        if waiters is not None:
            waiters.cond.notify_all()

    def _replay_record(self, body: memoryview) -> None:
        """Apply one journal record at open (single-threaded, no lock needed)."""
        kind = records.record_type(body)
        if kind == records.ADD_BATCH:
            batch = records.decode_add_batch(body)
            ledger = (batch.scope, batch.ledger)
            meta = self._meta_for_replay(ledger)
            if meta.deleted:
                return
            with body[records.ADD_HEADER_BYTES:] as region:
                [(log_id, offset)] = self._logs.append_regions([region])
            self._index_batch(ledger, meta, _locations(log_id, offset, batch), batch)
        elif kind == records.MASTER_KEY:
            scope, ledger_id, key = records.decode_master_key(body)
            ledger = (scope, ledger_id)
            meta = self._meta_for_replay(ledger)
            if not meta.deleted and meta.key is None:
                meta.key = key
            elif not meta.deleted and meta.key != key:
                log.warning("replay: conflicting master key ignored ledger=%s", ledger)
        elif kind == records.FENCE:
            ledger = records.decode_ledger_record(body)
            meta = self._meta_for_replay(ledger)
            if not meta.deleted:
                meta.fenced = True
        elif kind == records.EXPLICIT_LAC:
            scope, ledger_id, lac = records.decode_explicit_lac(body)
            ledger = (scope, ledger_id)
            meta = self._meta_for_replay(ledger)
            if not meta.deleted:
                self._raise_lac(ledger, meta, lac)
        elif kind == records.DELETE:
            ledger = records.decode_ledger_record(body)
            self._meta_for_replay(ledger).mark_deleted()
        else:
            raise RecordFormatError(f"unknown journal record type {kind}")
        self._dirty.add(ledger)

    def _meta_for_replay(self, ledger: LedgerKey) -> LedgerMeta:
        meta = self._ledgers.get(ledger)
        if meta is None:
            # Normally a MASTER_KEY record or a ledger file comes first; tolerate either order.
            meta = LedgerMeta(None)
            self._ledgers[ledger] = meta
        return meta

    # ---- read path ----------------------------------------------------------------------

    def _missing_ledger_status(self) -> Status:
        # In uncertain mode we may have lost what we once had: never claim "no such ledger".
        return Status.UNKNOWN_ENTRY_STATE if self._uncertain else Status.NO_SUCH_LEDGER

    def read_lac(self, ledger: LedgerKey) -> tuple[Status, int]:
        if not _valid_ledger(ledger):
            return Status.INVALID_REQUEST, LAC_NONE
        with self._lock:
            if self._closed:
                return Status.INTERNAL_ERROR, LAC_NONE
            meta = self._ledgers.get(ledger)
            if meta is None or meta.deleted:
                return self._missing_ledger_status(), LAC_NONE
            return Status.OK, meta.lac

    def wait_lac(self, ledger: LedgerKey, min_lac: int, timeout_s: float) -> tuple[Status, int]:
        """Long poll: return as soon as LAC >= min_lac, or at the timeout with the current LAC
        (status OK either way; NO_SUCH_LEDGER if the ledger is unknown or gets deleted)."""
        if not _valid_ledger(ledger) or not isinstance(min_lac, int):
            return Status.INVALID_REQUEST, LAC_NONE
        deadline = time.monotonic() + min(max(timeout_s, 0.0), WAIT_LAC_TIMEOUT_MAX_S)
        with self._lock:
            meta = self._ledgers.get(ledger)
            if self._closed:
                return Status.INTERNAL_ERROR, LAC_NONE
            if meta is None or meta.deleted:
                return self._missing_ledger_status(), LAC_NONE
            if meta.lac >= min_lac:
                return Status.OK, meta.lac
            waiters = self._lac_waiters.get(ledger)
            if waiters is None:
                waiters = self._lac_waiters[ledger] = _LacWaiters(self._lock)
            waiters.count += 1
            try:
                while meta.lac < min_lac and not meta.deleted and not self._closed:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    waiters.cond.wait(remaining)
            finally:
                waiters.count -= 1
                if waiters.count == 0:
                    del self._lac_waiters[ledger]
            if meta.deleted:
                return self._missing_ledger_status(), LAC_NONE
            return Status.OK, meta.lac

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
        with self._lock:
            if self._closed:
                return Status.INTERNAL_ERROR, None
            meta = self._ledgers.get(ledger)
            if meta is None or meta.deleted:
                return self._missing_ledger_status(), None
            locs, lens = meta.index.window(first, count)
            missing = Status.UNKNOWN_ENTRY_STATE if self._uncertain else Status.NO_SUCH_ENTRY
            self._reads_inflight += 1
        answer = RangeRead()
        try:
            answer = read_window(self._logs.pread, ledger, first, locs, lens, max_bytes, missing)
        finally:
            with self._lock:
                self._reads_inflight -= 1
                if self._closed and self._reads_inflight == 0:
                    self._reads_drained.notify_all()
                stats = self._stats
                stats.read_calls += 1
                stats.reads += answer.count
                stats.read_bytes += answer.data_bytes
                stats.corrupt_reads += len(answer.corrupt)
                stats.read_preads += answer.preads
        for log_id, offset, error in answer.failed_preads:
            log.error("entry log read failed ledger=%s log_id=%d offset=%d error=%s",
                      ledger, log_id, offset, error)
        for c in answer.corrupt:
            # Never NO_SUCH_ENTRY for an entry we hold a damaged copy of: it might be the one
            # recovery is asking about (PAR / TigerBeetle "do not nack corrupt entries").
            self._report_corrupt(ledger, c.entry_id, c.location, c.length)
        return Status.OK, answer

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

    # ---- introspection and modes --------------------------------------------------------

    def ledgers(self) -> list[LedgerKey]:
        with self._lock:
            return [key for key, meta in self._ledgers.items() if not meta.deleted]

    def ledger_state(self, ledger: LedgerKey) -> LedgerState | None:
        with self._lock:
            meta = self._ledgers.get(ledger)
            if meta is None or meta.deleted:
                return None
            return LedgerState(meta.fenced, meta.lac, meta.index.count, meta.index.size_bytes,
                               meta.key is not None)

    @property
    def read_only(self) -> bool:
        """Refusing adds: the disk is full (set_read_only) or the journal failed."""
        return self._read_only or self._failed

    @property
    def journal_failed(self) -> bool:
        return self._failed

    def set_read_only(self, read_only: bool) -> None:
        """The disk monitor's verdict. It never makes a bookie whose journal failed writable."""
        if read_only != self._read_only:
            log.warning("storage read_only=%s data_dir=%s", read_only, self._data_dir)
        self._read_only = read_only

    def disk_usage(self) -> tuple[int, int]:
        usage = shutil.disk_usage(self._data_dir)
        return usage.used, usage.total

    @property
    def uncertain(self) -> bool:
        return self._uncertain

    def _enter_uncertain(self, reason: str) -> None:
        atomic_write(self._data_dir / UNCERTAIN_MARKER_NAME,
                     f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')} {reason}\n".encode(), fsync=True)
        self._uncertain = True
        log.error("entering uncertain mode data_dir=%s reason=%s", self._data_dir, reason)

    def clear_uncertain(self) -> None:
        """Operator action, once this bookie's ledgers are known complete (re-replicated)."""
        path = self._data_dir / UNCERTAIN_MARKER_NAME
        path.unlink(missing_ok=True)
        fsync_dir(self._data_dir)
        with self._lock:
            was = self._uncertain
            self._uncertain = False
        if was:
            log.warning("uncertain mode cleared by operator data_dir=%s", self._data_dir)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            out = self._stats.to_dict()
            out.update(
                pending_add_bytes=self._queue.pending_bytes,
                pending_add_bytes_max=self._queue.pending_bytes_max,
                ledgers=sum(1 for m in self._ledgers.values() if not m.deleted),
                dirty_ledgers=len(self._dirty),
                applied_journal_position=tuple(self._applied_pos),
                uncertain=self._uncertain,
                read_only=self._read_only or self._failed,
                failed=self._failed,
            )
        return out

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
