"""Concurrent re-replications of one fragment, made deterministic: the first one's compare-and-set
of the new ensemble is held at a gate while the second runs to the end. Real bookies."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import pytest

from metadata import LedgerId, LedgerMetadata
from pyspark_ledger.autorecovery.rereplication import rereplicate
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.protocol.placement import RandomPlacement
from pyspark_ledger.testing.local_cluster import LocalCluster

ENTRIES = 20
GATE_WAIT_S = 60.0


class PreferringPlacement(RandomPlacement):
    """Picks replacements in a scripted order, so the test decides who takes which bookie."""

    def __init__(self, preferred: Sequence[str]):
        super().__init__()
        self.preferred = list(preferred)

    def replacement(self, ensemble: Sequence[str], candidates: Sequence[str], **_: object) -> str:
        return next(b for b in self.preferred if b in candidates and b not in ensemble)


class HeldFirstCas:
    """Holds this client's first compare-and-set of ledger metadata until released."""

    def __init__(self, client: LedgerClient):
        self.real = client.ledgers.compare_and_set
        self.arrived, self.release = threading.Event(), threading.Event()
        self.calls = 0

    def __call__(self, meta: LedgerMetadata, expected_version: int) -> int:
        self.calls += 1
        if self.calls == 1:
            self.arrived.set()
            assert self.release.wait(GATE_WAIT_S), "the gate was never released"
        return self.real(meta, expected_version)


def closed_ledger(client: LedgerClient, ensemble: list[str]) -> tuple[LedgerId, list[bytes]]:
    w = client.create_ledger(3, 3, 2, ensemble=ensemble)
    payloads = [b"entry %d " % i * 100 for i in range(ENTRIES)]
    for p in payloads:
        w.add_entry(p)
    w.close()
    return w.ledger_id, payloads


def race(first: Callable[[], list[tuple[int, str]]], second: Callable[[], list[tuple[int, str]]],
         gate: HeldFirstCas) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """Run `first` until its compare-and-set reaches the gate, run `second` to the end, release."""
    out: dict[str, object] = {}

    def run_first() -> None:
        try:
            out["first"] = first()
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            out["first"] = exc

    t = threading.Thread(target=run_first)
    t.start()
    assert gate.arrived.wait(GATE_WAIT_S), "the first re-replication never reached its compare-and-set"
    try:
        second_done = second()
    finally:
        gate.release.set()
        t.join(GATE_WAIT_S)
    assert not t.is_alive()
    first_done = out["first"]
    if isinstance(first_done, Exception):
        raise AssertionError(f"the first re-replication failed: {first_done!r}") from first_done
    return first_done, second_done


def assert_readable_from(client: LedgerClient, lid: LedgerId, payloads: list[bytes]) -> None:
    meta = client.ledger_metadata(lid)
    assert [e.payload for e in client.open_ledger(lid).read_entries(0, meta.last_entry_id)] == payloads


def test_concurrent_rereplications_of_one_bookie_keep_the_first_recorded_replacement(
        make_cluster: Callable[..., LocalCluster], monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = make_cluster(5)
    a, b, c, d, e = (bk.bookie_id for bk in cluster.bookies)
    with LedgerClient(cluster.metadata_uri, add_timeout_s=5, placement=PreferringPlacement([d])) as one, \
            LedgerClient(cluster.metadata_uri, add_timeout_s=5, placement=PreferringPlacement([e])) as two:
        lid, payloads = closed_ledger(one, [a, b, c])
        cluster.bookies[0].kill()
        gate = HeldFirstCas(one)
        monkeypatch.setattr(one.ledgers, "compare_and_set", gate)
        first, second = race(lambda: rereplicate(one.context, lid, a), lambda: rereplicate(two.context, lid, a), gate)
        ensemble = one.ledger_metadata(lid).segments[0].bookies
        assert ensemble == (e, b, c), "the replacement recorded first was overwritten"
        assert second == [(0, e)]
        assert first == [(0, e)], "the re-replication that lost the race reports a bookie the metadata does not name"
        for bk in cluster.bookies[1:3]:
            bk.kill()  # only the replacement holds a copy now
        assert_readable_from(two, lid, payloads)


def test_concurrent_rereplications_of_two_bookies_that_pick_the_same_replacement_both_succeed(
        make_cluster: Callable[..., LocalCluster], monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = make_cluster(5)
    a, b, c, d, e = (bk.bookie_id for bk in cluster.bookies)
    with LedgerClient(cluster.metadata_uri, add_timeout_s=5, placement=PreferringPlacement([d, e])) as one, \
            LedgerClient(cluster.metadata_uri, add_timeout_s=5, placement=PreferringPlacement([d, e])) as two:
        lid, payloads = closed_ledger(one, [a, b, c])
        gate = HeldFirstCas(one)
        monkeypatch.setattr(one.ledgers, "compare_and_set", gate)
        # Both pick d: the second records b -> d first, so the first must pick again (e) and copy again.
        first, second = race(lambda: rereplicate(one.context, lid, a), lambda: rereplicate(two.context, lid, b), gate)
        assert second == [(0, d)] and first == [(0, e)]
        ensemble = one.ledger_metadata(lid).segments[0].bookies
        assert ensemble == (e, d, c)
        for bk in (cluster.bookies[0], cluster.bookies[1], cluster.bookies[2]):
            bk.kill()  # a, b gone; c too: d and e must hold every entry
        assert_readable_from(two, lid, payloads)
        cluster.bookies[3].kill()  # d gone too: e alone
        assert_readable_from(two, lid, payloads)
