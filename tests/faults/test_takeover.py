"""A log writer process killed (kill -9) with large entries in flight, a few acknowledged:
14 x 1 MiB and 600 x 10 KB, E3 W3 A2, all bookies but one SIGSTOPped while the burst is sent
(pyspark_ledger.testing.takeover explains the method). A new writer takes over (fences and
recovers the previous ledger) and appends; every acknowledged entry reads back intact, once, in
order. No timing assertion here: bench/takeover_bench.py measures the time to take over."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.fault_check import FaultCounters
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.testing.takeover import run_takeover
from tests.faults.harness import ROUNDS, report


@pytest.mark.parametrize("count,size", [(14, 2**20), (600, 10_000)], ids=["14x1MiB", "600x10KB"])
def test_new_writer_takes_over_from_a_writer_killed_with_entries_in_flight(
        zk_uri: str, tmp_path: Path, count: int, size: int) -> None:
    started = time.monotonic()
    with LocalCluster(3, metadata_uri=zk_uri, work_dir=tmp_path / "cluster") as cluster, \
            LedgerClient(zk_uri) as client:
        rows: dict[str, FaultCounters] = {}
        for i in range(ROUNDS):
            r = run_takeover(client, cluster.bookies, f"takeover-{i}", count=count, size=size, acked_first=3)
            assert r.sent, "the writer did not send its burst before the kill"
            assert r.acked[:3] == [0, 1, 2], r.acked
            assert r.old_in_log >= len(r.acked)
            assert not r.counters.violations(), r.counters
            assert r.counters.acked == len(r.acked) + 1  # the old writer's acks and the new writer's append
            rows.setdefault(f"takeover-{count}x{size}", FaultCounters()).add(r.counters)
            print(f"round {i}: old writer acked {len(r.acked)}, {r.old_in_log} of its entries in the log "
                  f"({r.old_in_log - len(r.acked)} unacknowledged ones recovered)")
    report(f"writer killed with {count} x {size} B in flight, new writer takes over", rows, started)
