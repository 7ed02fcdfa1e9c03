"""Where the Arrow write's bound is on this machine: CPU per MB of the bookies and of the writer,
the raw client's rate for the same entry sizes, and the Spark Arrow write's, against disk / 3.

Issue 33 asks an Arrow `df.write.format("ledger")` for 0.8 of the disk's write-and-fsync
bandwidth divided by three (three bookies on one disk store every byte three times). This
measures, in one run, on 3 real bookies (embedded store, fsync on), E=3 W=3 A=2:

  disk     sequential 1 MiB writes + fdatasync in the bookies' directory (median of 3 probes)
  client   one LedgerClient adding entries of the Arrow write's sizes with
           WriteHandle.add_entries_async, kept within the Spark write task's in-flight bounds
           (datasource/write/task.py): no Spark, no Arrow encoding
  spark    (--spark) the Spark Arrow write of `--rows` rows of id + 100 random bytes, local[2]

For each: payload MB/s, its ratio to disk / 3, and CPU seconds per payload MB of each part
(bookies: each process's utime + stime from /proc; the client: this process; Spark: the JVM
and every Python worker under it, children included; and a 2-row write's time: the job's fixed
cost), with the rate those CPU costs allow
on this machine's cores when nothing else runs: cores / (CPU s per MB, all parts together).
Rounds alternate the workloads; figures are medians; the load average is printed.

    python bench/write_bound_bench.py [--mb 200] [--rounds 3] [--spark] [--rows 2000000]
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine_speed import write_fsync_mb_s

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.datasource.write.task import ADD_WAIT_TIMEOUT_S, INFLIGHT_BYTES_MAX, INFLIGHT_ENTRIES_MAX
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.transport.add_future import AddFuture

DISK_PROBES = 3
TICKS = os.sysconf("SC_CLK_TCK")
ARROW_ENTRY_BYTES = 8_192 * 108 + 1_000  # an Arrow entry of the default 8,192 rows of id + 100 B (IPC framing)


def cpu_s(pid: int, children: bool = False) -> float:
    """utime + stime of a process (and of its waited-for children), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    used = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    return used / TICKS


def descendants(root: int) -> list[int]:
    """Every live process under `root` (by parent pid), root included."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = [root], [root]
    for _ in range(16):  # the tree is shallow: JVM -> daemon -> workers
        frontier = [p for p, pp in parents.items() if pp in frontier]
        if not frontier:
            break
        found += frontier
    return found


def tree_cpu_s(root: int, below_only: bool = False) -> float:
    """CPU seconds of `root` and everything under it (below_only: of what is under it)."""
    total = 0.0
    for pid in descendants(root)[1 if below_only else 0:]:
        try:
            total += cpu_s(pid, children=True)
        except OSError:
            continue
    return total


def client_adds(client: LedgerClient, entry_bytes: int, total_bytes: int) -> None:
    """One ledger, entries of `entry_bytes` added as the Spark task adds them (one run per entry,
    bounded in flight like _TaskLedger)."""
    w = client.create_ledger(3, 3, 2)
    payload = os.urandom(entry_bytes)
    window: deque[AddFuture] = deque()
    inflight = 0
    for _ in range(max(1, total_bytes // entry_bytes)):
        window.append(w.add_entries_async([payload]))
        inflight += entry_bytes
        if len(window) > INFLIGHT_ENTRIES_MAX or inflight > INFLIGHT_BYTES_MAX:
            while window and inflight > INFLIGHT_BYTES_MAX // 2:
                last = window.popleft()
                inflight -= entry_bytes
            last.result(timeout=ADD_WAIT_TIMEOUT_S)
    if window:
        window[-1].result(timeout=ADD_WAIT_TIMEOUT_S)
    w.close()


def measure(fn: Callable[[], None], payload_bytes: int, bookie_pids: list[int], writer: Callable[[], float]) -> dict[str, float]:
    before_b = [cpu_s(p) for p in bookie_pids]
    before_w = writer()
    start = time.perf_counter()
    fn()
    wall = time.perf_counter() - start
    mb = payload_bytes / 1e6
    bookie = [(cpu_s(p) - b) / mb for p, b in zip(bookie_pids, before_b, strict=True)]
    out = {"s": wall, "mb_s": mb / wall, "bookie_cpu_s_per_mb": sum(bookie) / len(bookie),
           "writer_cpu_s_per_mb": (writer() - before_w) / mb}
    os.sync()  # untimed: no run is measured during the writeback of another
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=200, help="payload MB per client run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--spark", action="store_true", help="also the Spark Arrow write (local[2])")
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--bookie-args", default="",
                    help="extra bookie options, space-separated (e.g. '--entry-log-cache-mb 0')")
    ap.add_argument("--entry-sizes", default=f"{ARROW_ENTRY_BYTES},{2 * 2**20},{4 * 2**20 - 4096}")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    sizes = [int(s) for s in args.entry_sizes.split(",")]

    work = Path(tempfile.mkdtemp(prefix="write-bound-bench-"))
    disk = statistics.median(write_fsync_mb_s(str(work)) for _ in range(DISK_PROBES))
    cluster = LocalCluster(3, work_dir=work / "cluster", bookie_args=args.bookie_args.split()).start()
    pids = [b.proc.pid for b in cluster.bookies if b.proc is not None]
    loads = [os.getloadavg()]
    results: dict[str, list[dict[str, float]]] = {}
    spark: Any = None
    try:
        with LedgerClient(cluster.metadata_uri) as client:
            workloads: dict[str, Callable[[], dict[str, float]]] = {}
            for size in sizes:
                total = args.mb * 10**6

                def run_client(size: int = size, total: int = total) -> dict[str, float]:
                    n = max(1, total // size)
                    return measure(lambda: client_adds(client, size, total), n * size, pids,
                                   lambda: sum(os.times()[:2]))

                workloads[f"client, entries of {size / 1e6:.2f} MB"] = run_client
            if args.spark:
                spark, run_spark = spark_workload(cluster.metadata_uri, args.rows, pids)
                workloads["spark arrow write"] = run_spark
            for fn in workloads.values():
                fn()  # warm-up
            for r in range(args.rounds):
                names = list(workloads) if r % 2 == 0 else list(reversed(workloads))
                for name in names:
                    results.setdefault(name, []).append(workloads[name]())
        loads.append(os.getloadavg())
    finally:
        if spark is not None:
            spark.stop()
        cluster.close()
        shutil.rmtree(work, ignore_errors=True)
    report(disk, loads, results, args.rounds)


def spark_workload(uri: str, rows: int, bookie_pids: list[int]) -> tuple[Any, Callable[[], dict[str, float]]]:
    from pyspark.sql import functions as F
    from spark_timing import payload_column

    from pyspark_ledger.testing.local_cluster import local_spark_session

    spark = local_spark_session("write-bound-bench")
    jvm = spark.sparkContext._gateway.proc.pid  # type: ignore[union-attr]  # py4j is untyped: proc is set at launch
    df = spark.range(rows, numPartitions=2).select(F.col("id"), payload_column("random").alias("payload")).cache()
    df.count()
    opts = {"metadataServiceUri": uri, "ensembleSize": "3", "writeQuorumSize": "3", "ackQuorumSize": "2", "log": "wb-arrow"}

    tiny = spark.range(2, numPartitions=2).select(F.col("id"), payload_column("random").alias("payload")).cache()
    tiny.count()

    def write(frame: Any) -> None:
        frame.write.format("ledger").options(**opts).option("payloadFormat", "arrow").mode("overwrite").save()

    def run() -> dict[str, float]:
        fixed = measure(lambda: write(tiny), 2 * 108, bookie_pids, lambda: tree_cpu_s(jvm))["s"]
        python_before = tree_cpu_s(jvm, below_only=True)
        got = measure(lambda: write(df), rows * 108, bookie_pids, lambda: tree_cpu_s(jvm))
        python = (tree_cpu_s(jvm, below_only=True) - python_before) / (rows * 108 / 1e6)
        return {**got, "fixed_s": fixed, "python_cpu_s_per_mb": python}

    return spark, run


def report(disk: float, loads: list[tuple[float, float, float]], results: dict[str, list[dict[str, float]]],
           rounds: int) -> None:
    cores = os.cpu_count() or 1
    print(f"3 bookies (fsync on), E=3 W=3 A=2, {cores} cores; median of {rounds} alternating rounds after a warm-up")
    print(f"disk: sequential 1 MiB write + fdatasync {disk:,.0f} MB/s (median of {DISK_PROBES}), a third {disk / 3:,.0f} MB/s")
    print("load average at the start and end: " + " / ".join(f"{a:.1f}, {b:.1f}, {c:.1f}" for a, b, c in loads))
    print(f"| {'workload':<30} | {'MB/s':>7} | {'/ (disk/3)':>10} | {'bookie CPU ms/MB':>16} | "
          f"{'writer CPU ms/MB':>16} | {'CPU-bound MB/s':>14} |")
    print(f"|{'-' * 32}|{'-' * 8}:|{'-' * 11}:|{'-' * 17}:|{'-' * 17}:|{'-' * 15}:|")
    for name, runs in results.items():
        mb_s = statistics.median(r["mb_s"] for r in runs)
        bookie = statistics.median(r["bookie_cpu_s_per_mb"] for r in runs)
        writer = statistics.median(r["writer_cpu_s_per_mb"] for r in runs)
        bound = cores / (3 * bookie + writer)  # every core busy with this write alone
        print(f"| {name:<30} | {mb_s:>7,.1f} | {mb_s / (disk / 3):>10.2f} | {bookie * 1e3:>16.2f} | "
              f"{writer * 1e3:>16.2f} | {bound:>14,.0f} |")
    for name, runs in results.items():
        if "fixed_s" in runs[0]:
            print(f"{name}: a job's fixed cost (the same write of 2 rows, 2 tasks: ledger create, staging, "
                  f"commit) {statistics.median(r['fixed_s'] for r in runs):.2f} s; of the writer's CPU, the Python "
                  f"workers' {statistics.median(r['python_cpu_s_per_mb'] for r in runs) * 1e3:.2f} ms/MB (the rest: the JVM)")


if __name__ == "__main__":
    main()
