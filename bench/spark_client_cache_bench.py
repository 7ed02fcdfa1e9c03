"""Trigger planning with and without the per-worker client cache (issue 33 item 4): a log -> log
streaming query of one-second micro-batches on 3 real bookies and a real ZooKeeper, run in
alternating rounds with LEDGER_SPARK_CLIENT_CACHE=1 and =0 (pyspark_ledger/testing/micro_batch_driver.py,
a fresh Spark driver per round). Per mode: the median of Spark's per-batch durations
(latestOffset: the source's offset scan; planning: triggerExecution minus addBatch, i.e. everything
a trigger does besides running the batch's tasks; addBatch: the tasks and the sink's commit), and
the metadata sessions opened (total, and the most any one Python process opened).

    python bench/spark_client_cache_bench.py [--batches 30] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine_speed import machine_speed_line

from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.testing.micro_batch_driver import MicroBatchRun, run_micro_batches
from pyspark_ledger.testing.zookeeper_server import LocalZooKeeper


def summary(runs: list[MicroBatchRun]) -> str:
    durations = [d for r in runs for d in r.durations[1:]]  # the first batch of a run also starts the query
    offset = statistics.median(d.get("latestOffset", 0) for d in durations)
    planning = statistics.median(d["triggerExecution"] - d.get("addBatch", 0) for d in durations)
    add = statistics.median(d.get("addBatch", 0) for d in durations)
    trigger = statistics.median(d["triggerExecution"] for d in durations)
    sessions = sum(sum(r.sessions.values()) for r in runs)
    most = max(max(r.sessions.values(), default=0) for r in runs)
    batches = sum(len(r.durations) for r in runs)
    return (f"latestOffset {offset:6.0f} ms  planning {planning:6.0f} ms  addBatch {add:6.0f} ms  "
            f"trigger {trigger:6.0f} ms  | sessions {sessions} for {batches} batches, at most {most} per process")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    print(machine_speed_line(), flush=True)
    print(f"load average at start: {os.getloadavg()[0]:.2f}", flush=True)
    runs: dict[bool, list[MicroBatchRun]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="client-cache-bench-") as tmp:
        with LocalZooKeeper(Path(tmp) / "zk") as zk, \
                LocalCluster(3, metadata_uri=zk.uri("/bench"), work_dir=Path(tmp) / "cluster") as cluster:
            for i in range(args.rounds):
                for cache in (True, False) if i % 2 == 0 else (False, True):
                    name = f"{'on' if cache else 'off'}{i}"
                    runs[cache].append(run_micro_batches(cluster.metadata_uri, Path(tmp), name, args.batches,
                                                         cache=cache))
                    print(f"round {i} cache {'on ' if cache else 'off'}: {summary(runs[cache][-1:])}", flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    print(f"\nmedians over {args.rounds} rounds of {args.batches} one-second micro-batches")
    print(f"cache on : {summary(runs[True])}")
    print(f"cache off: {summary(runs[False])}")


if __name__ == "__main__":
    main()
