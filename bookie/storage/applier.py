"""Applying durable journal records: the group committer's apply step (append the group's
entries to the entry logs, index them, raise LACs) and the same for each record replayed at
open. Owns the applied journal position, which a checkpoint covers."""

from __future__ import annotations

import logging

from bookie.storage import records
from bookie.storage.engine_types import _locations
from bookie.storage.entry_log import EntryLogs
from bookie.storage.errors import RecordFormatError
from bookie.storage.journal import JournalPosition
from bookie.storage.journal_queue import KIND_ADD, KIND_LAC, JournalItem
from bookie.storage.ledger_table import LedgerTable

log = logging.getLogger(__name__)


class Applier:
    def __init__(self, table: LedgerTable, logs: EntryLogs) -> None:
        self._table = table
        self._logs = logs
        # Every record before it is in the entry logs and the table; guarded by table.lock.
        self._applied = JournalPosition(0, 0)

    def applied_position(self) -> JournalPosition:
        """Read before the dirty ledgers are taken, a checkpoint covers every record before it:
        those were indexed (and marked dirty) before this position was published."""
        with self._table.lock:
            return self._applied

    def reset_position(self, position: JournalPosition) -> None:
        """A new journal file starts at `position`: everything before it is applied."""
        with self._table.lock:
            self._applied = position

    # ---- the apply thread ---------------------------------------------------------------

    def apply_group(self, group: list[JournalItem], end: JournalPosition) -> None:
        adds = [item for item in group if item.kind == KIND_ADD]
        placements = self._logs.append_regions([item.payload.region for item in adds]) if adds else []
        # Entry locations are computed before taking the lock: readers wait less.
        locations = [_locations(log_id, offset, item.payload)
                     for item, (log_id, offset) in zip(adds, placements)]
        table = self._table
        with table.lock:
            next_add = 0
            for item in group:
                if item.kind == KIND_ADD:
                    locs = locations[next_add]
                    next_add += 1
                    meta = table.live_locked(item.ledger)
                    if meta is not None:  # else deleted while the add was in flight
                        table.index_batch_locked(item.ledger, meta, locs, item.payload)
                elif item.kind == KIND_LAC:
                    meta = table.live_locked(item.ledger)
                    if meta is not None:
                        table.raise_lac_locked(item.ledger, meta, item.payload)
            self._applied = end

    # ---- replay at open -----------------------------------------------------------------

    def replay_record(self, body: memoryview) -> None:
        """Apply one journal record at open (single-threaded: the lock is not needed, and the
        table's `*_locked` methods are called without it)."""
        table = self._table
        kind = records.record_type(body)
        if kind == records.ADD_BATCH:
            batch = records.decode_add_batch(body)
            ledger = (batch.scope, batch.ledger)
            meta = table.meta_for_replay(ledger)
            if meta.deleted:
                return
            with body[records.ADD_HEADER_BYTES:] as region:
                [(log_id, offset)] = self._logs.append_regions([[region]])
            table.index_batch_locked(ledger, meta, _locations(log_id, offset, batch), batch)
        elif kind == records.MASTER_KEY:
            scope, ledger_id, key = records.decode_master_key(body)
            ledger = (scope, ledger_id)
            meta = table.meta_for_replay(ledger)
            if not meta.deleted and meta.key is None:
                meta.key = key
            elif not meta.deleted and meta.key != key:
                log.warning("replay: conflicting master key ignored ledger=%s", ledger)
        elif kind == records.FENCE:
            ledger = records.decode_ledger_record(body)
            meta = table.meta_for_replay(ledger)
            if not meta.deleted:
                meta.fenced = True
        elif kind == records.EXPLICIT_LAC:
            scope, ledger_id, lac = records.decode_explicit_lac(body)
            ledger = (scope, ledger_id)
            meta = table.meta_for_replay(ledger)
            if not meta.deleted:
                table.raise_lac_locked(ledger, meta, lac)
        elif kind == records.DELETE:
            ledger = records.decode_ledger_record(body)
            table.meta_for_replay(ledger).mark_deleted()
        else:
            raise RecordFormatError(f"unknown journal record type {kind}")
        table.mark_dirty_locked(ledger)
