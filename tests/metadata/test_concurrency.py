"""Acceptance: compare-and-set and id allocation stay exact across OS processes, on both stores."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

from metadata import CreateContext, LedgerManager, LedgerMetadata, MetadataStore, QuorumConfig
from tests.metadata import workers

PROCESSES = 4
INCREMENTS = 250


def test_cas_race_four_processes(store: MetadataStore, store_uri: str) -> None:
    store.create("/counter", b"0")
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(PROCESSES, mp_context=ctx) as pool:
        futures = [pool.submit(workers.cas_increments, store_uri, "/counter", INCREMENTS) for _ in range(PROCESSES)]
        won = [v for f in futures for v in f.result(timeout=300)]
    final = store.read("/counter")
    assert int(final.value) == PROCESSES * INCREMENTS == 1000
    assert final.version == 1000
    # Every reported success is a distinct version: no conflicting write was reported as a success.
    assert sorted(won) == list(range(1, 1001))


def test_id_allocation_eight_processes_no_reuse(store: MetadataStore, store_uri: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(8, mp_context=ctx) as pool:
        futures = [pool.submit(workers.allocate_ids, store_uri, 200) for _ in range(8)]
        ids = [i for f in futures for i in f.result(timeout=300)]
    assert len(ids) == 1600 and len(set(ids)) == 1600
    # Create and delete ledgers with some ids; later allocations never hand them out again.
    mgr = LedgerManager(store)
    used = []
    for _ in range(5):
        lid = mgr.allocate_ledger_id()
        mgr.create(LedgerMetadata.new(lid, QuorumConfig(1, 1, 1), ["b1"], create_context=CreateContext()))
        mgr.delete(lid)
        used.append(lid.id)
    later = [mgr.allocate_ledger_id().id for _ in range(50)]
    assert not set(later) & (set(ids) | set(used))
    assert min(later) > max(used) > max(ids)


def test_many_processes_open_a_brand_new_embedded_store_at_once(tmp_path) -> None:
    uri = f"sqlite://{tmp_path / 'fresh.db'}"
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(8, mp_context=ctx) as pool:
        results = list(pool.map(workers.open_fresh_and_create, [uri] * 16, [f"n{i}" for i in range(16)], timeout=120))
    assert all(results)
    from metadata import open_store

    with open_store(uri) as store:
        assert len(store.children("/fresh")) == 16
