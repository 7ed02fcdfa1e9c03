"""A three-node ZooKeeper ensemble on 127.0.0.1: the leader is killed (kill -9) during appends and
rollovers, LEDGER_ZK_ROUNDS times (default 2): the same log writer keeps appending and rolling over
after the re-election, and no acknowledged entry is lost. Re-election-to-first-append times are
printed (run with -s), never asserted."""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.log import LogWriter
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.testing.zookeeper_server import LocalZooKeeperEnsemble

ROUNDS = int(os.environ.get("LEDGER_ZK_ROUNDS", "2"))
STEP_BOUND_S = 60.0  # generous bound on each wait: a hang fails, slowness does not
ROLLOVER_ENTRIES = 5


@pytest.fixture
def ensemble(tmp_path: Path) -> Iterator[LocalZooKeeperEnsemble]:
    zk = LocalZooKeeperEnsemble(tmp_path / "ensemble").start()
    try:
        yield zk
    finally:
        zk.close()


class _Appender(threading.Thread):
    """Appends until stopped or the writer fails; records each acknowledgement's time."""

    def __init__(self, writer: LogWriter):
        super().__init__(daemon=True)
        self.writer = writer
        self.acked: list[tuple[float, bytes]] = []
        self.ledgers_at: list[tuple[float, object]] = []
        self.failure: BaseException | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        for i in range(1_000_000):  # bounded by the stop event long before
            if self.stop.is_set():
                return
            payload = b"entry-%d" % i
            try:
                self.writer.append(payload)
            except Exception as exc:  # noqa: BLE001 - reported by the test
                self.failure = exc
                return
            now = time.monotonic()
            self.acked.append((now, payload))
            self.ledgers_at.append((now, self.writer.current_ledger))

    def wait_for(self, predicate: object, what: str) -> None:
        deadline = time.monotonic() + STEP_BOUND_S
        while not predicate() and self.is_alive() and time.monotonic() < deadline:
            assert self.failure is None, f"the writer failed: {self.failure!r}"
            time.sleep(0.01)
        assert self.failure is None, f"the writer failed: {self.failure!r}"
        assert predicate(), f"{what} did not happen within {STEP_BOUND_S:g} s"


def _leader_round(ensemble: LocalZooKeeperEnsemble, appender: _Appender) -> float:
    """Kill the leader, wait for a new one and for an append and a rollover after it; bring the
    killed server back. Returns seconds from re-election to the first acknowledged append."""
    count = len(appender.acked)
    appender.wait_for(lambda: len(appender.acked) >= count + 3, "appends before the kill")
    leader = ensemble.leader()
    leader.kill()
    ensemble.wait_serving(len(ensemble.members) - 1, timeout_s=STEP_BOUND_S)
    elected = time.monotonic()
    appender.wait_for(lambda: appender.acked[-1][0] > elected, "an append after the re-election")
    first = next(t for t, _ in appender.acked if t > elected)
    ledger_then = appender.ledgers_at[-1][1]
    appender.wait_for(lambda: appender.ledgers_at[-1][1] != ledger_then, "a rollover after the re-election")
    leader.start()
    ensemble.wait_serving(len(ensemble.members), timeout_s=STEP_BOUND_S)
    return first - elected


def test_leader_killed_during_appends_and_rollovers(ensemble: LocalZooKeeperEnsemble, tmp_path: Path) -> None:
    uri = ensemble.uri("/failover")
    with LocalCluster(3, metadata_uri=uri, work_dir=tmp_path / "cluster"):
        client = LedgerClient(uri)
        try:
            writer = client.open_log_writer("failover", rollover_entries=ROLLOVER_ENTRIES)
            appender = _Appender(writer)
            appender.start()
            try:
                times = [_leader_round(ensemble, appender) for _ in range(ROUNDS)]
            finally:
                appender.stop.set()
                appender.join(STEP_BOUND_S)
            assert not appender.is_alive() and appender.failure is None, f"writer: {appender.failure!r}"
            print(f"{ROUNDS} rounds, re-election to first append (s): {[round(t, 3) for t in times]}, "
                  f"median {statistics.median(times):.3f}, {len(appender.acked)} entries acknowledged")
            writer.close()
            content = [e.payload for e in client.open_log_reader("failover").read()]
            acked = [p for _, p in appender.acked]
            missing = [p for p in acked if p not in set(content)]
            assert not missing, f"{len(missing)} acknowledged entries lost: {missing[:5]}"
            assert content == acked, "the log differs from the acknowledged appends, in order"
        finally:
            client.close()
