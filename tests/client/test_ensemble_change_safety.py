"""An add never completes on the ack of a bookie that the ensemble change is replacing.

Issue 17's safety defect, replayed deterministically with a scripted transport: the test decides
which bookie answers what, and when the ensemble change's compare-and-set lands.

  entry 0 goes to a, b, c (E=3, W=3, A=2); c acknowledges it, then fails entry 1;
  the writer starts a new fragment at its first unacknowledged entry (0) with d in place of c;
  while that compare-and-set is in flight, a acknowledges entry 0.

The old handle completed entry 0 then (acks from c and a), and the metadata recorded entry 0 in
the fragment [a, b, d] where only a held it: one more failure lost an acknowledged entry."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from bookie.status import Status
from metadata import LedgerId, LedgerManager, LedgerMetadata, QuorumConfig, open_store
from pyspark_ledger.ledger.context import LedgerContext
from pyspark_ledger.ledger.write_handle import WriteHandle
from pyspark_ledger.protocol.distribution import write_set_of
from pyspark_ledger.transport.bookie_pool import Faults

WAIT_S = 10.0


class ScriptedBookie:
    """Keeps every add it is sent; the test answers them when it wants."""

    def __init__(self, bookie_id: str):
        self.bookie_id = bookie_id
        self.sent: list[tuple[list[int], Callable[[Status, str], None]]] = []
        self.arrived = threading.Condition()

    def submit_encoded(self, batch: object, callback: Callable[[Status, str], None], *, timeout_s: float,
                       on_stored: object = None):
        ids = list(batch._entry_ids)  # set by the test's batch spy below
        with self.arrived:
            self.sent.append((ids, callback))
            self.arrived.notify_all()
        return None

    def answer(self, entry_id: int, status: Status) -> None:
        with self.arrived:
            assert self.arrived.wait_for(lambda: any(entry_id in ids for ids, _ in self.sent), WAIT_S), \
                f"entry {entry_id} never reached {self.bookie_id}"
            ids, cb = next((ids, cb) for ids, cb in self.sent if entry_id in ids)
            self.sent.remove((ids, cb))
        cb(status, "scripted")

    def write_lac(self, *args: object, **kwargs: object) -> None:
        return None


class ScriptedPool:
    def __init__(self, bookies: Sequence[str]):
        self.clients = {b: ScriptedBookie(b) for b in bookies}
        self.faults = Faults()
        self.rpc_timeout_s = 5.0
        self.poller = self  # futures ask the poller to drive; nobody reads sockets here

    def drive(self, done: Callable[[], bool], deadline: float | None, waiting_on: threading.Condition) -> bool:
        return False

    def wake(self) -> None:
        return None

    def get(self, bookie_id: str) -> ScriptedBookie:
        return self.clients[bookie_id]

    def writable(self, exclude: set[str] | frozenset[str] = frozenset()) -> list[str]:
        return [b for b in self.clients if b not in exclude]

    def quarantine(self, bookie_id: str) -> None:
        return None

    def is_quarantined(self, bookie_id: str) -> bool:
        return False


class FirstPlacement:
    def replacement(self, ensemble: Sequence[str], candidates: Sequence[str], **_: object) -> str:
        return sorted(set(candidates) - set(ensemble))[0]


class GatedLedgers(LedgerManager):
    """Holds the first ensemble change's compare-and-set until the test opens the gate."""

    def __init__(self, store: object):
        super().__init__(store)
        self.cas_started = threading.Event()
        self.gate = threading.Event()

    def compare_and_set(self, meta: LedgerMetadata, version: int) -> int:
        if meta.state.value == "OPEN" and "d" in meta.segments[-1].bookies and not self.gate.is_set():
            self.cas_started.set()
            assert self.gate.wait(WAIT_S)
        return super().compare_and_set(meta, version)


def test_no_completion_on_a_replaced_bookies_ack(tmp_path: Path, monkeypatch) -> None:
    import pyspark_ledger.ledger.write_handle as wh

    real_batch = wh.EncodedAddBatch

    class SpyBatch:
        @staticmethod
        def of_columns(key, mk, ids, lacs, datas, **kw):
            return _Spied(real_batch.of_columns(key, mk, ids, lacs, datas, **kw), list(ids))

    monkeypatch.setattr(wh, "EncodedAddBatch", SpyBatch)
    store = open_store(f"sqlite:///{tmp_path / 'meta.db'}")
    ledgers = GatedLedgers(store)
    pool = ScriptedPool(["a", "b", "c", "d"])
    meta = LedgerMetadata.new(LedgerId(0, 1), QuorumConfig(3, 3, 2), ["a", "b", "c"])
    version = ledgers.create(meta)
    ctx = LedgerContext(ledgers, pool, FirstPlacement(), add_timeout_s=5.0, explicit_lac_interval_ms=0)
    w = WriteHandle(ctx, meta, version, b"")
    try:
        f0 = w.add_entry_async(b"entry 0")
        pool.get("c").answer(0, Status.OK)
        f1 = w.add_entry_async(b"entry 1")
        pool.get("c").answer(1, Status.INTERNAL_ERROR)  # c fails: the ensemble must change
        assert ledgers.cas_started.wait(WAIT_S), "the writer never started the ensemble change"
        pool.get("a").answer(0, Status.OK)  # a and c now hold entry 0 ...
        assert not f0.done(), "entry 0 completed on the ack of c, which the change is replacing"
        ledgers.gate.set()
        pool.get("b").answer(0, Status.OK)  # ... and b, a member of the new fragment: now it may complete
        assert f0.result(WAIT_S) == 0
        new = ledgers.read(meta.ledger_id)[0]
        assert [(s.first_entry_id, s.bookies) for s in new.segments] == [(0, ("a", "b", "d"))]
        for b in ("a", "b", "d"):
            pool.get(b).answer(1, Status.OK)
        assert f1.result(WAIT_S) == 1
        # Every acknowledged entry has A copies among the bookies the metadata names for it.
        holders = {0: {"a", "b"}, 1: {"a", "b", "d"}}
        for e, have in holders.items():
            named = write_set_of(e, new.ensemble_for(e), new.write_quorum_size)
            assert len(have & set(named)) >= new.ack_quorum_size
    finally:
        ledgers.gate.set()
        w._close_quietly()
        store.close()


class _Spied:
    """An EncodedAddBatch that remembers its entry ids for the scripted bookies."""

    def __init__(self, batch: object, ids: list[int]):
        self._batch = batch
        self._entry_ids = ids

    def __getattr__(self, name: str) -> object:
        return getattr(self._batch, name)
