"""The index part of the storage engine (BookKeeper's LedgerCache + ledger metadata): every
ledger's in-memory state (ledger_index.LedgerMeta: master key, fence bit, LAC, closed last
entry, entry index), which ledgers changed since the last checkpoint, the long-poll LAC
waiters, and the durable snapshots in the index store (checkpoint.py, index_store.py).

`lock` guards all of that. It is also the lock the read path counts its reads in flight under
and the applier publishes its journal position under, so that one acquisition per request
covers a lookup and what must change with it: the hot paths take no second lock.
"""

from __future__ import annotations

import logging
import threading
from array import array
from pathlib import Path

from bookie.status import Status
from bookie.storage import records
from bookie.storage.checkpoint import encode_ledger, load_ledger_snapshots, write_ledger_snapshots
from bookie.storage.config import LOCATION_OFFSET_BITS
from bookie.storage.durable_files import remove_tmp_files
from bookie.storage.engine_types import LedgerKey, LedgerState, _LacWaiters
from bookie.storage.errors import InvariantError, ensure
from bookie.storage.index_store import IndexStore
from bookie.storage.ledger_index import LedgerMeta

log = logging.getLogger(__name__)

Snapshot = tuple[LedgerKey, list[bytes]]


class LedgerTable:
    """Thread-safe through `lock`; methods named `*_locked` expect the caller to hold it."""

    def __init__(self, store: IndexStore) -> None:
        self.lock = threading.Lock()
        self.closed = False  # set by close_requests(): no more reads, waits or writes
        self._metas: dict[LedgerKey, LedgerMeta] = {}
        self._dirty: set[LedgerKey] = set()
        self._lac_waiters: dict[LedgerKey, _LacWaiters] = {}
        self._store: IndexStore | None = store

    @classmethod
    def load(cls, ledgers_dir: Path, fsync: bool) -> LedgerTable:
        """Open the index store under `ledgers_dir` and load every ledger's snapshot."""
        remove_tmp_files(ledgers_dir)
        table = cls(IndexStore(ledgers_dir, fsync))
        try:
            for loaded in load_ledger_snapshots(table.store, ledgers_dir, fsync):
                table._metas[loaded.key] = loaded.meta
        except BaseException:
            table.close()
            raise
        return table

    @property
    def store(self) -> IndexStore:
        if self._store is None:
            raise InvariantError("index store used after close")
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def close_requests(self) -> bool:
        """Refuse reads and writes from now on and wake every long poll. False if already closed."""
        with self.lock:
            if self.closed:
                return False
            self.closed = True
            for waiters in self._lac_waiters.values():
                waiters.cond.notify_all()
            return True

    # ---- lookups (caller holds the lock) ------------------------------------------------

    def get_locked(self, ledger: LedgerKey) -> LedgerMeta | None:
        """The ledger's state, deleted ones (tombstones) included."""
        return self._metas.get(ledger)

    def live_locked(self, ledger: LedgerKey) -> LedgerMeta | None:
        meta = self._metas.get(ledger)
        return None if meta is None or meta.deleted else meta

    def state(self, ledger: LedgerKey) -> LedgerState | None:
        with self.lock:
            meta = self.live_locked(ledger)
            if meta is None:
                return None
            return LedgerState(meta.fenced, meta.lac, meta.index.count, meta.index.size_bytes, meta.key is not None)

    def master_key(self, ledger: LedgerKey) -> bytes | None:
        with self.lock:
            meta = self.live_locked(ledger)
            return None if meta is None else meta.key

    @property
    def metas(self) -> dict[LedgerKey, LedgerMeta]:
        """The map itself, for tests that look at an entry's stored location."""
        return self._metas

    # ---- snapshots of many ledgers (take the lock) --------------------------------------

    def live(self) -> list[tuple[LedgerKey, LedgerMeta]]:
        """Every non-deleted ledger. Their indexes are read outside the lock by GC, compaction
        and the scrubber: only the apply thread and compaction's relocation change them."""
        with self.lock:
            return [(k, m) for k, m in self._metas.items() if not m.deleted]

    def live_count_locked(self) -> int:
        return sum(1 for m in self._metas.values() if not m.deleted)

    def dirty_count_locked(self) -> int:
        return len(self._dirty)

    def referenced_log_ids(self) -> set[int]:
        """Every entry log id the index points into (dirty tails included)."""
        out: set[int] = set()
        for _, meta in self.live():
            out.update(loc >> LOCATION_OFFSET_BITS for _, loc, _ in meta.index.items())
        return out

    def entries_in_logs(self, log_ids: set[int]) -> dict[LedgerKey, int]:
        """Per ledger, how many of its served entries (up to a CLOSED ledger's last) are stored
        in `log_ids`: at open, what a lost ledger directory held."""
        out: dict[LedgerKey, int] = {}
        for key, meta in self.live():
            cap = meta.closed_last
            n = sum(1 for entry_id, loc, _ in meta.index.items()
                    if loc >> LOCATION_OFFSET_BITS in log_ids and (cap is None or entry_id <= cap))
            if n:
                out[key] = n
        return out

    # ---- changes (caller holds the lock) ------------------------------------------------

    def mark_dirty_locked(self, ledger: LedgerKey) -> None:
        self._dirty.add(ledger)

    def meta_for_write_locked(self, ledger: LedgerKey, key: bytes, record_version: int = 0
                              ) -> tuple[LedgerMeta | None, Status | None, tuple[bytes, ...]]:
        """The state a write with `key` applies to, created for an unseen ledger. Returns
        (state, refusal, records to journal first): a new ledger's key is journaled
        (MASTER_KEY, of `record_version`) ahead of the write, in the same item, so replay sees it first."""
        meta = self._metas.get(ledger)
        if meta is None:
            meta = self._metas[ledger] = LedgerMeta(key)
        elif meta.deleted:
            return None, Status.NO_SUCH_LEDGER, ()
        elif meta.key is None:  # known only from a replayed record that carried no key
            meta.key = key
        elif meta.key != key:
            return None, Status.UNAUTHORIZED, ()
        else:
            return meta, None, ()
        self._dirty.add(ledger)
        return meta, None, records.encode_master_key(ledger[0], ledger[1], key, record_version)

    def meta_for_replay(self, ledger: LedgerKey) -> LedgerMeta:
        """Replay at open (single-threaded): the ledger's state, created if unseen."""
        meta = self._metas.get(ledger)
        if meta is None:
            # Normally a MASTER_KEY record or a ledger snapshot comes first; tolerate either order.
            meta = self._metas[ledger] = LedgerMeta(None)
        return meta

    def index_batch_locked(self, ledger: LedgerKey, meta: LedgerMeta, locs: array[int],
                           batch: records.EncodedBatch | records.DecodedBatch) -> None:
        """Record where a durable batch's entries are, and the LAC it carries."""
        meta.index.put_batch(batch.ids, locs, batch.lens, batch.contiguous, batch.data_bytes)
        self._dirty.add(ledger)
        self.raise_lac_locked(ledger, meta, batch.max_lac)

    def raise_lac_locked(self, ledger: LedgerKey, meta: LedgerMeta, lac: int) -> None:
        if lac <= meta.lac:
            return
        meta.lac = lac
        self._dirty.add(ledger)
        waiters = self._lac_waiters.get(ledger)
        if waiters is not None:
            waiters.cond.notify_all()

    def delete_locked(self, ledger: LedgerKey, meta: LedgerMeta) -> None:
        """Turn the ledger into a tombstone and wake its long polls."""
        meta.mark_deleted()
        self._dirty.add(ledger)
        waiters = self._lac_waiters.get(ledger)
        if waiters is not None:
            waiters.cond.notify_all()

    # ---- long polls (caller holds the lock) ---------------------------------------------

    def join_waiters_locked(self, ledger: LedgerKey) -> _LacWaiters:
        waiters = self._lac_waiters.get(ledger)
        if waiters is None:
            waiters = self._lac_waiters[ledger] = _LacWaiters(self.lock)
        waiters.count += 1
        return waiters

    def leave_waiters_locked(self, ledger: LedgerKey, waiters: _LacWaiters) -> None:
        waiters.count -= 1
        ensure(waiters.count >= 0, "LAC waiter count went negative")
        if waiters.count == 0:
            del self._lac_waiters[ledger]

    # ---- checkpoint ---------------------------------------------------------------------

    def take_dirty(self) -> tuple[set[LedgerKey], list[Snapshot]]:
        """The ledgers changed since the last call, with their encoded snapshots (copies made
        under the lock; checksums and writes come later, outside it)."""
        with self.lock:
            dirty, self._dirty = self._dirty, set()
            return dirty, [(key, encode_ledger(key, self._metas[key])) for key in dirty]

    def restore_dirty(self, dirty: set[LedgerKey]) -> None:
        """A checkpoint failed after take_dirty: its ledgers are written by the next one."""
        with self.lock:
            self._dirty |= dirty

    def write_snapshots(self, snapshots: list[Snapshot]) -> None:
        """Persist snapshots in one index-store transaction (the checkpoint thread's step)."""
        write_ledger_snapshots(self.store, snapshots)
