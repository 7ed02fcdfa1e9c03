"""Applying durable journal records to the index: the apply thread's groups, and replay at open."""

from __future__ import annotations

import logging
from array import array

from bookie.storage import records
from bookie.storage.engine_fields import EngineFields
from bookie.storage.engine_types import LedgerKey, _locations
from bookie.storage.errors import RecordFormatError
from bookie.storage.group_commit import KIND_ADD, KIND_LAC, JournalItem
from bookie.storage.journal import JournalPosition
from bookie.storage.ledger_index import LedgerMeta

log = logging.getLogger(__name__)


class ApplyMixin(EngineFields):
    """Part of BookieStorage (engine.py): uses its fields and lock."""

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

