"""GC you can trust (issue 31, item 6), in-process with a real storage engine and a real metadata
store (bookie/storage/gc.py wired as bookie/gc_service.py wires it):

- a store whose reads lag (a ZooKeeper server behind the leader: a just-created ledger is missed
  until `sync()`) makes GC delete nothing;
- an absent scope-0 ledger newer than every id metadata shows is kept;
- with max_ledgers_per_scan = 3, ten deleted ledgers are all collected within 4 scans;
- a CLOSED ledger's copy no fragment names any more is collected after its grace period, never
  before, never while a swap or reshape record names this bookie, never for an OPEN ledger.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bookie.gc_service import highest_ledger_id, metadata_lookup, records_in_flight
from bookie.status import Status
from bookie.storage import BookieStorage
from bookie.storage.gc import GarbageCollector, GcSettings
from metadata.ids import LedgerId
from metadata.ledger import LedgerMetadata
from metadata.ledgers import LedgerManager
from metadata.paths import ledger_path, ledger_reshape_path, replica_swap_path
from metadata.quorum import QuorumConfig
from metadata.recovery_records import reshape_record_bookies, swap_record_bookies
from metadata.store import MetadataStore, Versioned
from metadata.uri import open_store
from pyspark_ledger.autorecovery.counting_store import CountingStore
from pyspark_ledger.autorecovery.swap_record import new_record
from tests.bookie.test_storage_support import add_ids, open_engine, read_all_ok

ME = "bookie-me"


class LaggingStore(CountingStore):
    """A store whose first read of each `miss_once` path answers "no node" (a ZooKeeper server
    behind the one the ledger was created through), whatever came before it."""

    def __init__(self, inner: MetadataStore):
        super().__init__(inner, lambda: None)
        self.miss_once: set[str] = set()
        self.syncs: list[str] = []

    def get(self, path: str) -> Versioned | None:
        if path in self.miss_once:
            self.miss_once.discard(path)
            return None
        return self.inner.get(path)

    def sync(self, path: str) -> None:
        self.syncs.append(path)
        self.inner.sync(path)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[BookieStorage]:
    e = open_engine(tmp_path / "data")
    try:
        yield e
    finally:
        e.close()


def create(store: MetadataStore, ensemble: tuple[str, ...] = (ME,), lid: LedgerId | None = None) -> LedgerMetadata:
    ledgers = LedgerManager(store)
    meta = LedgerMetadata.new(lid or ledgers.allocate_ledger_id(0), QuorumConfig(len(ensemble), 1, 1), ensemble)
    ledgers.create(meta)
    return meta


def key(meta: LedgerMetadata) -> tuple[int, int]:
    return (meta.ledger_id.scope_id, meta.ledger_id.id)


def collector(engine: BookieStorage, store: MetadataStore, **settings: float) -> GarbageCollector:
    return GarbageCollector(engine, metadata_lookup(store), GcSettings(interval_s=0, lookups_per_s=0, **settings),
                            bookie_id=ME, highest_id=highest_ledger_id(store), in_flight=records_in_flight(store))


def test_a_lagging_first_read_deletes_nothing(engine: BookieStorage, zk_uri: str) -> None:
    inner = open_store(zk_uri)
    try:
        store = LaggingStore(inner)
        meta = create(store)
        create(store)  # a newer ledger: the id bound alone would not save the first one
        assert add_ids(engine, key(meta), range(5)) == Status.OK
        store.miss_once.add(ledger_path(meta.ledger_id))
        stats = collector(engine, store).run_now(compact=False)
        assert stats["ledgers_deleted"] == 0
        assert ledger_path(meta.ledger_id) in store.syncs  # the miss was checked again after a sync
        assert not store.miss_once
        read_all_ok(engine, key(meta), range(5))

        # The store bites: one plain read after the fault misses the ledger.
        store.miss_once.add(ledger_path(meta.ledger_id))
        assert LedgerManager(store).get(meta.ledger_id) is None
    finally:
        inner.close()


def test_an_absent_ledger_newer_than_any_id_in_metadata_is_kept(engine: BookieStorage, zk_uri: str) -> None:
    with open_store(zk_uri) as store:
        kept = create(store)
        future = (0, kept.ledger_id.id + 5)  # an id the counter has not handed out yet
        gone = create(store)
        for ledger in (key(kept), future, key(gone)):
            assert add_ids(engine, ledger, range(3)) == Status.OK
        LedgerManager(store).delete(gone.ledger_id)
        stats = collector(engine, store).run_now(compact=False)
        assert stats["ledgers_deleted"] == 1
        assert stats["absent_kept_above_highest_id"] == 1
        assert sorted(engine.ledgers()) == sorted([key(kept), future])


def test_every_ledger_is_reached_past_max_ledgers_per_scan(engine: BookieStorage, zk_uri: str) -> None:
    with open_store(zk_uri) as store:
        doomed = [create(store) for _ in range(10)]
        for meta in doomed:
            assert add_ids(engine, key(meta), range(2)) == Status.OK
            LedgerManager(store).delete(meta.ledger_id)
        gc = collector(engine, store, max_ledgers_per_scan=3)
        left = []
        for _ in range(4):
            gc.run_now(compact=False)
            left.append(len(engine.ledgers()))
        assert left == [7, 4, 1, 0], left


def test_live_ledgers_first_in_id_order_do_not_hide_the_rest(engine: BookieStorage, zk_uri: str) -> None:
    with open_store(zk_uri) as store:
        live = [create(store) for _ in range(3)]  # the lowest ids: a scan that restarts at the front sees only these
        doomed = [create(store) for _ in range(4)]
        for meta in live + doomed:
            assert add_ids(engine, key(meta), range(2)) == Status.OK
        for meta in doomed:
            LedgerManager(store).delete(meta.ledger_id)
        gc = collector(engine, store, max_ledgers_per_scan=3)
        for _ in range(3):  # 7 ledgers, 3 a scan
            gc.run_now(compact=False)
        assert sorted(engine.ledgers()) == sorted(key(m) for m in live)


def test_an_over_replicated_copy_is_collected_after_its_grace(engine: BookieStorage, tmp_path: Path) -> None:
    with open_store(f"sqlite://{tmp_path / 'meta.db'}") as store:
        now = [1000.0]
        gc = GarbageCollector(engine, metadata_lookup(store), GcSettings(interval_s=0, lookups_per_s=0,
                                                                         over_replicated_grace_s=60),
                              bookie_id=ME, highest_id=highest_ledger_id(store), in_flight=records_in_flight(store),
                              clock=lambda: now[0])
        ledgers = LedgerManager(store)
        moved, still_open, swapping, reshaping = (create(store, ("b1", "b2")) for _ in range(4))
        for meta in (moved, still_open, swapping, reshaping):
            assert add_ids(engine, key(meta), range(4)) == Status.OK
        for meta in (moved, swapping, reshaping):
            ledgers.update(meta.ledger_id, lambda m: m.close(3, 400))
        swap = new_record(swapping.ledger_id, 0, ME, "b2", "worker")
        store.create(replica_swap_path(swapping.ledger_id, 0, ME), swap.to_bytes())
        store.create(ledger_reshape_path(reshaping.ledger_id),
                     json.dumps({"E": 2, "W": 1, "A": 1, "ensembles": [[ME, "b2"]], "leaving": ["b1"],
                                 "fromVersion": 1, "holder": "", "sinceMs": 0}).encode())

        gc.run_now(compact=False)  # first seen over-replicated
        now[0] += 59
        assert gc.run_now(compact=False)["over_replicated_deleted"] == 0  # within the grace
        now[0] += 2
        stats = gc.run_now(compact=False)
        assert stats["over_replicated_deleted"] == 1
        assert sorted(engine.ledgers()) == sorted(key(m) for m in (still_open, swapping, reshaping))

        # The records finish: their copies go too; the OPEN ledger's never does.
        store.delete(replica_swap_path(swapping.ledger_id, 0, ME))
        store.delete(ledger_reshape_path(reshaping.ledger_id))
        assert gc.run_now(compact=False)["over_replicated_deleted"] == 3
        assert engine.ledgers() == [key(still_open)]
        read_all_ok(engine, key(still_open), range(4))


def test_the_record_readers_name_what_the_client_writes() -> None:
    swap = new_record(LedgerId(0, 7), 1, "lost-b", "new-b", "worker")
    assert swap_record_bookies(swap.to_bytes()) == {"lost-b", "new-b"}
    assert swap_record_bookies(b"{not json") is None
    from pyspark_ledger.autorecovery.reshape import ReshapeRecord
    from pyspark_ledger.protocol.reshape import ReshapePlan

    record = ReshapeRecord(ReshapePlan(2, 2, 1, (("a", "b"), ("b", "c")), ("d",)), 3, "me", 0)
    assert reshape_record_bookies(record.to_bytes()) == {"a", "b", "c", "d"}
    assert reshape_record_bookies(b'{"ensembles": 3}') is None
