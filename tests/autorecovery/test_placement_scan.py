"""The placement check and scan (issue 29 item 3) over metadata only: which ledgers break the
rack rule, which are marked (closed, fixable, every bookie registered), and a worker never
fences an OPEN ledger to move a copy."""

from __future__ import annotations

import threading

from metadata import BookieInfo, LedgerId, LedgerMetadata, QuorumConfig
from metadata.underreplication import REASON_MISPLACED, UnderReplicationManager
from pyspark_ledger.autorecovery.metrics import AutorecoveryMetrics
from pyspark_ledger.autorecovery.placement_scan import PlacementScan, RackView, check_ledger
from pyspark_ledger.autorecovery.replication_worker import ReplicationWorker
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.protocol.placement import RackRules

RACKS = {"a0": "z1/r0", "a1": "z1/r0", "b0": "z1/r1", "b1": "z1/r1", "c0": "z2/r2", "c1": "z2/r2"}
VIEW = RackView(RACKS, frozenset(RACKS.values()))


def ledger(n: int, *fragments: tuple[int, list[str]], w: int = 3, closed: bool = True) -> LedgerMetadata:
    first = fragments[0][1]
    meta = LedgerMetadata.new(LedgerId(0, n), QuorumConfig(len(first), w, 2), first)
    for start, ensemble in fragments[1:]:
        meta = meta.with_ensemble_change(start, ensemble)
    return meta.close(20, 2000) if closed else meta


def test_check_ledger_finds_narrow_write_sets_and_what_to_move() -> None:
    rules = RackRules(3)
    assert check_ledger(ledger(1, (0, ["a0", "b0", "c0"])), VIEW, rules) is None
    found = check_ledger(ledger(2, (0, ["a0", "b0", "c0"]), (10, ["a0", "a1", "c0"])), VIEW, rules)
    assert found is not None and found.fragments == ((1, ("z1/r0", "z2/r2")),) and found.move == ("a1",)
    assert check_ledger(ledger(3, (0, ["a0", "a1", "c0"])), VIEW, RackRules(2)) is None  # 2 racks meet a minimum of 2
    # With only two racks writable, a move can reach 2 racks, which this ledger has: nothing to move yet.
    two_racks = RackView(RACKS, frozenset({"z1/r0", "z1/r1"}))
    found = check_ledger(ledger(4, (0, ["a0", "a1", "b0"])), two_racks, rules)
    assert found is not None and found.move == ()
    # A bookie that is not registered counts as a rack of its own and is left to the lost-bookie path.
    assert check_ledger(ledger(5, (0, ["a0", "gone", "c0"])), VIEW, rules) is None
    found = check_ledger(ledger(6, (0, ["a0", "a1", "gone"])), VIEW, rules)
    assert found is not None and found.move == ()


def test_scan_marks_closed_misplaced_ledgers_only(sqlite_uri: str) -> None:
    with LedgerClient(sqlite_uri) as client:
        good = ledger(client.ledgers.allocate_ledger_id(0).id, (0, ["a0", "b0", "c0"]))
        bad = ledger(client.ledgers.allocate_ledger_id(0).id, (0, ["a0", "a1", "c0"]))
        bad_open = ledger(client.ledgers.allocate_ledger_id(0).id, (0, ["b0", "b1", "c0"]), closed=False)
        for meta in (good, bad, bad_open):
            client.ledgers.create(meta)
        result = PlacementScan(client.store, "test", 1000.0).run(VIEW, RackRules(3), lambda: True)
        assert (result.misplaced, result.marked, result.complete) == (2, 1, True)
        marks = UnderReplicationManager(client.store).list()
        assert [(m.ledger_id, m.lost_bookies, m.reason) for m in marks] == [(bad.ledger_id, ("a1",), REASON_MISPLACED)]
        # Planted in the test: a rule nobody breaks. The same scan then marks nothing.
        assert PlacementScan(client.store, "test", 1000.0).run(VIEW, RackRules(1), lambda: True).misplaced == 0
        # Told to stop, it stops before the next ledger and says it did not finish.
        stopped = PlacementScan(client.store, "test", 1000.0).run(VIEW, RackRules(3), lambda: False)
        assert (stopped.misplaced, stopped.complete) == (0, False)


def test_worker_never_fences_an_open_ledger_for_a_misplaced_mark(sqlite_uri: str) -> None:
    with LedgerClient(sqlite_uri) as client:
        for b, rack in RACKS.items():
            client.registry.register(BookieInfo(b, f"127.0.0.1:{1 + len(b)}", rack=rack))
        meta = ledger(client.ledgers.allocate_ledger_id(0).id, (0, ["a0", "a1", "c0"]), closed=False)
        client.ledgers.create(meta)
        marks = UnderReplicationManager(client.store)
        marks.mark(meta.ledger_id, ["a1"], REASON_MISPLACED, "elsewhere")
        worker = ReplicationWorker(client.context, "w", open_ledger_grace_s=0, poll_interval_s=0.1, password=b"",
                                   metrics=AutorecoveryMetrics(), stop=threading.Event())
        assert worker.work_once()
        assert client.ledger_metadata(meta.ledger_id).state.value == "OPEN"  # not fenced, not recovered
        assert marks.get(meta.ledger_id) is None
