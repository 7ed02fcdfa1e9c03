"""The pure bookie-state rules, and under-replication marks and try-locks on both stores."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from metadata import BookieInfo, BookieRegistry, LedgerId, MetadataStore, open_store
from metadata.ephemeral_lock import read_lock, try_lock
from metadata.paths import AUDITOR_ELECTION, cookie_path
from metadata.underreplication import REASON_LOST, UnderReplicationManager
from pyspark_ledger.autorecovery.bookie_states import DOWN, READ_ONLY, UP, forget_audits, lost, observe, with_audited
from pyspark_ledger.autorecovery.elected_auditor import ElectedAuditor
from pyspark_ledger.autorecovery.metrics import AutorecoveryMetrics


def test_a_bookie_is_lost_only_after_the_grace_and_a_restart_keeps_nothing_down() -> None:
    states = observe({}, {"b0": False, "b1": True}, {"b0", "b1", "b2"}, now_ms=1_000)
    assert {b: s.state for b, s in states.items()} == {"b0": UP, "b1": READ_ONLY, "b2": DOWN}
    assert lost(states, now_ms=1_000 + 2_999, grace_ms=3_000) == set()
    assert lost(states, now_ms=1_000 + 3_000, grace_ms=3_000) == {"b2"}  # read-only b1 is never lost
    later = observe(states, {"b0": False, "b1": True}, {"b0", "b1", "b2"}, now_ms=5_000)
    assert later["b2"].since_ms == 1_000  # unchanged state keeps its since-when
    back = observe(later, {"b0": False, "b1": True, "b2": False}, {"b0", "b1", "b2"}, now_ms=6_000)
    assert back["b2"].state == UP and lost(back, now_ms=60_000, grace_ms=3_000) == set()
    down_again = observe(back, {"b0": False, "b1": True}, {"b0", "b1", "b2"}, now_ms=7_000)
    assert down_again["b2"].since_ms == 7_000 and not down_again["b2"].audited  # a new loss, a new scan
    assert with_audited(down_again["b2"]).audited
    assert "b2" not in observe(down_again, {"b0": False}, {"b0", "b1"}, now_ms=8_000)  # cookie deleted: gone


def test_forgetting_audits_keeps_the_down_since() -> None:
    """A new leader (or one whose registration watch fired) scans a lost bookie again, without
    a second grace period (simulator seed 6889)."""
    states = observe({}, {"b0": False}, {"b0", "b2"}, now_ms=1_000)
    audited = {"b0": states["b0"], "b2": with_audited(states["b2"])}
    forgotten = forget_audits(audited)
    assert not forgotten["b2"].audited and forgotten["b2"].since_ms == 1_000 and forgotten["b2"].state == DOWN
    assert lost(forgotten, now_ms=4_000, grace_ms=3_000) == {"b2"}
    assert forgotten["b0"] == audited["b0"]


def test_marks_merge_bookies_and_a_stale_clear_is_refused(store: MetadataStore) -> None:
    marks = UnderReplicationManager(store)
    lid = LedgerId(0, 42)
    assert marks.mark(lid, {"b1"}, REASON_LOST, "auditor-1")
    assert not marks.mark(lid, {"b1"}, REASON_LOST, "auditor-1")  # already marked: no write
    first, version = marks.get(lid)
    assert marks.mark(lid, {"b2"}, REASON_LOST, "auditor-2")
    merged, _ = marks.get(lid)
    assert merged.lost_bookies == ("b1", "b2") and merged.since_ms == first.since_ms
    assert not marks.clear(lid, version)  # a worker that read the old mark must not drop b2
    assert marks.ledger_ids() == [lid]
    assert marks.clear(lid, marks.get(lid)[1]) and marks.ledger_ids() == []


def test_a_lock_has_one_holder_and_goes_with_its_owner(store_uri: str) -> None:
    first, second = open_store(store_uri), open_store(store_uri)
    try:
        lock = try_lock(first, "/autorecovery/locks/x", "worker-1")
        assert lock is not None and lock.held()
        assert try_lock(second, "/autorecovery/locks/x", "worker-2") is None
        assert lock.update(copiedBytes=7) and read_lock(second, "/autorecovery/locks/x")["copiedBytes"] == 7
        lock.release()
        assert not lock.held()
        taken = try_lock(second, "/autorecovery/locks/x", "worker-2")
        assert taken is not None and read_lock(first, "/autorecovery/locks/x")["holder"] == "worker-2"
        second.close()  # the owner's session (or lease) ends: the claim goes with it
        assert try_lock(first, "/autorecovery/locks/x", "worker-1") is not None
    finally:
        first.close()
        second.close()


def test_one_auditor_is_elected_and_another_takes_over_when_it_stops(store_uri: str) -> None:
    stores = [open_store(store_uri), open_store(store_uri)]
    stops = [threading.Event(), threading.Event()]
    auditors = [ElectedAuditor(s, f"auditor-{i}", lost_bookie_grace_s=3, scan_rate_per_s=100,
                               metrics=AutorecoveryMetrics(), stop=stop)
                for i, (s, stop) in enumerate(zip(stores, stops))]
    threads = [threading.Thread(target=a.run, daemon=True) for a in auditors]
    try:
        threads[0].start()
        wait_for(lambda: auditors[0].leading)
        threads[1].start()
        time.sleep(1.5)  # the second one tries (at least once a second) and must not lead
        assert not auditors[1].leading
        assert read_lock(stores[1], AUDITOR_ELECTION)["holder"] == "auditor-0"
        stops[0].set()
        threads[0].join(5)
        wait_for(lambda: auditors[1].leading)
        assert read_lock(stores[0], AUDITOR_ELECTION)["holder"] == "auditor-1"
        assert auditors[1].metrics.auditor_leader._value.get() == 1
    finally:
        for stop in stops:
            stop.set()
        for t in threads:
            t.join(5)
        for s in stores:
            s.close()


def wait_for(condition: Callable[[], bool], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.05)


def test_the_auditor_logs_routine_bookie_states_at_info_and_a_bookie_down_at_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """docs/contributing.md: WARNING only for what an operator must act on. A bookie up or
    read-only is routine (its storage warned when it turned read-only); a bookie down is not."""
    store = open_store(f"sqlite://{tmp_path / 'meta.db'}")
    try:
        registry = BookieRegistry(store)
        regs = [registry.register(BookieInfo(b, f"127.0.0.1:{3181 + i}")) for i, b in enumerate(("b0", "b1"))]
        regs[1].set_read_only(True)
        store.ensure_path(cookie_path("b2"))  # registered once, not now: down
        auditor = ElectedAuditor(store, "auditor", lost_bookie_grace_s=60, scan_rate_per_s=100,
                                 metrics=AutorecoveryMetrics(), stop=threading.Event())
        with caplog.at_level(logging.INFO, logger="pyspark_ledger.autorecovery.elected_auditor"):
            auditor._observe({})
        levels = {r.getMessage(): r.levelname for r in caplog.records if r.getMessage().startswith("bookie state ")}
        assert levels == {"bookie state bookie=b0 state=up": "INFO", "bookie state bookie=b1 state=read-only": "INFO",
                          "bookie state bookie=b2 state=down": "WARNING"}, levels
        for reg in regs:
            reg.close()
    finally:
        store.close()
