"""The write path of the storage engine: adds, fences, explicit LACs and deletes, each
validated and turned into a journal item on the caller's thread.

add_batch encodes on the caller's thread, reserves pending bytes (BUSY after
add_enqueue_timeout_ms) and queues one item per batch, or, when the journal is idle, writes,
syncs and applies it in the caller's thread (group_commit.py). One table-lock acquisition per
request orders it against fences: an add claimed or queued before a fence is journaled first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from bookie.status import Status
from bookie.storage import records
from bookie.storage.config import ENTRY_ID_MAX, LAC_NONE, MASTER_KEY_BYTES_MAX, StorageConfig
from bookie.storage.engine_types import LedgerKey, _normalize_key, _valid_ledger, _Waiter
from bookie.storage.format_version import FormatState
from bookie.storage.journal_pipeline import JournalPipeline
from bookie.storage.journal_queue import KIND_ADD, KIND_CONTROL, KIND_LAC, JournalItem
from bookie.storage.ledger_table import LedgerTable
from bookie.storage.modes import EngineModes
from bookie.storage.stats import StorageStats

log = logging.getLogger(__name__)

# write_lac and delete_ledger wait at most this long for their journal record to be durable.
CONTROL_DURABLE_TIMEOUT_S = 10.0
# Upper bound on fence()'s caller-supplied timeout.
FENCE_TIMEOUT_MAX_S = 60.0
# The MASTER_KEY record that may precede a new ledger's first batch; counted in its reservation.
MASTER_KEY_RECORD_BYTES_MAX = (
    records.RECORD_HEADER_BYTES + records.MASTER_KEY_RECORD.size + MASTER_KEY_BYTES_MAX
)


class WritePath:
    def __init__(self, config: StorageConfig, table: LedgerTable, journal: JournalPipeline,
                 modes: EngineModes, stats: StorageStats, fmt: FormatState) -> None:
        self._config = config
        self._format = fmt  # the version byte of every record written (format_version.py)
        self._table = table
        self._journal = journal
        self._queue = journal.queue  # the same queue for the engine's life (reopen reuses it)
        self._modes = modes
        self._stats = stats

    def _refusal(self, allowed_when_read_only: bool) -> Status | None:
        if self._table.closed:
            return Status.INTERNAL_ERROR
        modes = self._modes
        if modes.failed:
            return Status.READ_ONLY  # recovery writes too: the journal takes nothing any more
        if modes.disk_read_only and not allowed_when_read_only:
            return Status.READ_ONLY
        return None

    def add_batch(self, ledger: LedgerKey, master_key: bytes, entries: Sequence[tuple[int, int, bytes | memoryview]],
                  recovery: bool, on_done: Callable[[Status], None], allow_inline: bool = True) -> None:
        """Validate synchronously (on_done called at once with the refusal), otherwise queue;
        on_done(OK) comes from the journal thread once the batch is durable and readable. With
        `allow_inline`, an add that finds the journal idle is written, synced and applied in the
        calling thread instead (on_done runs before this returns); callers submitting several
        batches at once pass False so they share one group commit.
        Recovery adds are accepted on fenced ledgers and, like BookKeeper's high-priority
        writes, on a read-only bookie."""
        refusal = self._refusal(allowed_when_read_only=recovery)
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
                                             cfg.max_entry_size_bytes, ENTRY_ID_MAX, self._format.record_version)
        except records.BatchRejected as e:
            log.debug("add rejected ledger=%s reason=%s", ledger, e)
            on_done(Status.TOO_LARGE if e.too_large else Status.INVALID_REQUEST)
            return
        queue = self._queue
        reserved = batch.record_bytes + MASTER_KEY_RECORD_BYTES_MAX
        if reserved > queue.pending_bytes_max:
            on_done(Status.TOO_LARGE)
            return
        if not queue.reserve(reserved, cfg.add_enqueue_timeout_ms / 1000.0):
            with self._table.lock:
                self._stats.busy_rejections += 1
            on_done(Status.BUSY)
            return
        inline: JournalItem | None = None
        with self._table.lock:
            committer = self._journal.committer
            meta, status, key_record = self._table.meta_for_write_locked(ledger, key, self._format.record_version)
            if meta is not None and meta.fenced and not recovery:
                status = Status.FENCED
            if status is None:
                item = JournalItem((*key_record, *batch.parts), KIND_ADD, ledger, batch, on_done, reserved, bulk=recovery)
                # Claimed under this lock, so a fence that follows is journaled after this add.
                if allow_inline and committer is not None and committer.claim_inline():
                    inline = item
                elif not queue.push(item):
                    status = Status.INTERNAL_ERROR
        if inline is not None:
            committer.commit_claimed(inline)  # type: ignore[union-attr]  # claimed above: not None
            return
        if status is not None:
            queue.release(reserved)
            log.debug("add refused ledger=%s status=%s", ledger, status.name)
            on_done(status)

    def fence(self, ledger: LedgerKey, master_key: bytes, timeout_s: float) -> tuple[Status, int]:
        """See BookieStorage.fence."""
        refusal = self._refusal(allowed_when_read_only=True)
        if refusal is not None:
            return refusal, LAC_NONE
        key = _normalize_key(master_key)
        if key is None or not _valid_ledger(ledger):
            return Status.INVALID_REQUEST, LAC_NONE
        waiter = _Waiter()
        table = self._table
        with table.lock:
            meta, status, key_record = table.meta_for_write_locked(ledger, key, self._format.record_version)
            if meta is None or status is not None:
                return status or Status.INTERNAL_ERROR, LAC_NONE
            if not meta.fenced:
                log.info("fencing ledger=%s lac=%d", ledger, meta.lac)
            # Set now so adds queued after this call are refused; durable below before we return.
            meta.fenced = True
            table.mark_dirty_locked(ledger)
            parts = key_record + records.encode_fence(ledger[0], ledger[1], self._format.record_version)
            if not self._queue.push(JournalItem(parts, KIND_CONTROL, ledger, None, waiter)):
                return Status.INTERNAL_ERROR, LAC_NONE
        status = waiter.wait(min(max(timeout_s, 0.0), FENCE_TIMEOUT_MAX_S))
        if status != Status.OK:
            log.warning("fence not durable ledger=%s status=%s", ledger, status.name)
            return status, LAC_NONE
        with table.lock:
            return Status.OK, meta.lac

    def write_lac(self, ledger: LedgerKey, master_key: bytes, lac: int) -> Status:
        """See BookieStorage.write_lac."""
        refusal = self._refusal(allowed_when_read_only=False)
        if refusal is not None:
            return refusal
        key = _normalize_key(master_key)
        if (key is None or not _valid_ledger(ledger) or not isinstance(lac, int)
                or not LAC_NONE <= lac <= ENTRY_ID_MAX):
            return Status.INVALID_REQUEST
        waiter = _Waiter()
        with self._table.lock:
            meta, status, key_record = self._table.meta_for_write_locked(ledger, key, self._format.record_version)
            if meta is None or status is not None:
                return status or Status.INTERNAL_ERROR
            if meta.fenced:
                return Status.FENCED
            parts = key_record + records.encode_explicit_lac(ledger[0], ledger[1], lac, self._format.record_version)
            if not self._queue.push(JournalItem(parts, KIND_LAC, ledger, lac, waiter)):
                return Status.INTERNAL_ERROR
        return waiter.wait(CONTROL_DURABLE_TIMEOUT_S)

    def delete_ledger(self, ledger: LedgerKey) -> Status:
        """See BookieStorage.delete_ledger."""
        refusal = self._refusal(allowed_when_read_only=True)
        if refusal is not None:
            return refusal
        if not _valid_ledger(ledger):
            return Status.INVALID_REQUEST
        waiter = _Waiter()
        with self._table.lock:
            meta = self._table.get_locked(ledger)
            if meta is None:
                return Status.NO_SUCH_LEDGER
            if meta.deleted:
                return Status.OK
            self._table.delete_locked(ledger, meta)
            record = records.encode_delete(ledger[0], ledger[1], self._format.record_version)
            if not self._queue.push(JournalItem(record, KIND_CONTROL, ledger, None, waiter)):
                return Status.INTERNAL_ERROR
        log.info("ledger deleted ledger=%s", ledger)
        return waiter.wait(CONTROL_DURABLE_TIMEOUT_S)
