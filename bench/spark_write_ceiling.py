"""The ceiling of a Spark write through a Python data source, next to ours and Parquet's, in one run.

Issue 33 asks the Arrow write of format("ledger") for 0.8 of a third of the disk's
write-and-fsync bandwidth. Whatever the bookies do, a Python data source's write cannot be
faster than Spark handing the rows to a Python worker as Arrow batches. This bench measures that
hand-over alone: `nullsink`, a Python data source whose DataSourceArrowWriter takes every batch
and drops it (no ledger, no disk). Beside it, in the same session and the same run, on the same
cached DataFrame (id bigint, payload binary(100) random: 108 data bytes a row), alternating
order every round:

  parquet    Spark's own Parquet write (JVM only, local disk, snappy)
  nullsink   the do-nothing Python Arrow writer: the ceiling of any Python data source's write
  ledger     format("ledger") payloadFormat=arrow, 3 bookies (fsync on), E=3 W=3 A=2

For each, MB/s of data bytes, its ratio to a third of the disk probe (machine_speed.write_fsync_mb_s
in the bookies' directory, median of three, before anything runs) and CPU per MB: the JVM (the
driver and the local executor are one process), its Python workers, and the bookies (mean per
bookie), and from those the MB/s the write would reach with every core its own (cores / the sum,
bookies counted three times): on a loaded machine wall-clock MB/s says mostly how busy the
others were, CPU per MB less so. The load average is printed at the start and end.

--prefill-mb N first writes N MB to every bookie with the plain client (1 MiB entries, one
ledger, deleted after), so the timed writes meet bookies whose current entry log is past its
page-cache window (entry_log_cache_mb, default 256: docs/storage.md "Page cache"), as a bookie
that has run a while is: a new bookie's first window goes into pages the VM has never touched.

    python bench/spark_write_ceiling.py [--rows 1000000] [--rounds 3] [--arrow-batch-rows 8192]
                                        [--prefill-mb 0] [--bookie-args '--entry-log-cache-mb 16']
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
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine_speed import write_fsync_mb_s
from pyspark.sql import functions as F
from spark_timing import payload_column, register_nullsink
from write_bound_bench import cpu_s, tree_cpu_s

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.local_cluster import LocalCluster, local_spark_session

DISK_PROBES = 3
ROW_BYTES = 108  # id (8) + payload (100)


def measure(fn: Callable[[], None], jvm: int, bookies: list[int], mb: float) -> dict[str, float]:
    before_j, before_p = tree_cpu_s(jvm), tree_cpu_s(jvm, below_only=True)
    before_b = [cpu_s(p) for p in bookies]
    start = time.perf_counter()
    fn()
    wall = time.perf_counter() - start
    python = tree_cpu_s(jvm, below_only=True) - before_p
    out = {"mb_s": mb / wall, "jvm": (tree_cpu_s(jvm) - before_j - python) / mb, "python": python / mb,
           "bookie": sum(cpu_s(p) - b for p, b in zip(bookies, before_b, strict=True)) / len(bookies) / mb}
    os.sync()  # untimed: no run is measured during the writeback of another
    return out


def prefill(uri: str, mb: int) -> None:
    """Write `mb` MB to every bookie (E=W=3) with the plain client, then delete the ledger."""
    if mb <= 0:
        return
    payload = os.urandom(2**20)
    with LedgerClient(uri) as client:
        handle = client.create_ledger(3, 3, 2)
        futures = [handle.add_entry_async(payload) for _ in range(mb * 10**6 // len(payload))]
        futures[-1].result(timeout=600)
        handle.close()
        client.delete_ledger(handle.ledger_id)
    os.sync()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--arrow-batch-rows", type=int, default=8_192, help="the ledger write's option arrowBatchRows")
    ap.add_argument("--bookie-args", default="", help="extra bookie options, space-separated")
    ap.add_argument("--prefill-mb", type=int, default=0, help="MB written to every bookie before the timed runs")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    work = Path(tempfile.mkdtemp(prefix="spark-write-ceiling-"))
    disk = statistics.median(write_fsync_mb_s(str(work)) for _ in range(DISK_PROBES))
    cluster = LocalCluster(3, work_dir=work / "cluster", bookie_args=args.bookie_args.split()).start()
    prefill(cluster.metadata_uri, args.prefill_mb)
    spark = local_spark_session("spark-write-ceiling")
    register_nullsink(spark)
    jvm = spark.sparkContext._gateway.proc.pid  # type: ignore[union-attr]  # py4j is untyped: proc is set at launch
    bookies = [b.proc.pid for b in cluster.bookies if b.proc is not None]
    opts = {"metadataServiceUri": cluster.metadata_uri, "ensembleSize": "3", "writeQuorumSize": "3",
            "ackQuorumSize": "2", "log": "ceiling", "payloadFormat": "arrow",
            "arrowBatchRows": str(args.arrow_batch_rows)}
    results: dict[str, list[dict[str, float]]] = {"parquet": [], "nullsink": [], "ledger": []}
    loads = [os.getloadavg()]
    try:
        df = spark.range(args.rows, numPartitions=2).select(F.col("id"), payload_column("random").alias("payload")).cache()
        df.count()
        runs: dict[str, Callable[[], None]] = {
            "parquet": lambda: df.write.mode("overwrite").parquet(str(work / "p.parquet")),
            "nullsink": lambda: df.write.format("nullsink").mode("append").save(),
            "ledger": lambda: df.write.format("ledger").options(**opts).mode("overwrite").save(),
        }
        names = list(runs)
        for name in names:
            runs[name]()  # warm-up: Python workers, JIT
        os.sync()
        for r in range(args.rounds):
            order = names[r % 3:] + names[:r % 3]  # each workload first, middle and last in turn
            for name in order:
                results[name].append(measure(runs[name], jvm, bookies, args.rows * ROW_BYTES / 1e6))
        loads.append(os.getloadavg())
    finally:
        spark.stop()
        cluster.close()
        shutil.rmtree(work, ignore_errors=True)
    report(args, disk, loads, results)


def report(args: argparse.Namespace, disk: float, loads: list[tuple[float, float, float]],
           results: dict[str, list[dict[str, float]]]) -> None:
    third = disk / 3
    print(f"local[2], {os.cpu_count()} cores; {args.rows:,} rows of id + 100 B random payload; ledger: 3 bookies "
          f"(fsync on), E=3 W=3 A=2, arrowBatchRows={args.arrow_batch_rows}, bookie args {args.bookie_args.split()}, "
          f"prefill {args.prefill_mb} MB a bookie; median of {args.rounds} rounds (order rotating) after a warm-up")
    print(f"disk: sequential 1 MiB write + fdatasync {disk:,.0f} MB/s (median of {DISK_PROBES}), a third {third:,.0f} "
          f"MB/s, 0.8 of that {0.8 * third:,.0f} MB/s")
    print("load average at the start and end: " + " / ".join(f"{a:.1f}, {b:.1f}, {c:.1f}" for a, b, c in loads))
    cores = os.cpu_count() or 1
    print(f"| {'write':<9} | {'MB/s':>7} | {'/ (disk/3)':>10} | {'/ nullsink':>10} | {'JVM ms/MB':>9} | "
          f"{'Python ms/MB':>12} | {'bookie ms/MB':>12} | {'CPU-bound MB/s':>14} |")
    print(f"|{'-' * 11}|{'-' * 8}:|{'-' * 11}:|{'-' * 11}:|{'-' * 10}:|{'-' * 13}:|{'-' * 13}:|{'-' * 15}:|")
    null = statistics.median(x["mb_s"] for x in results["nullsink"])
    for name, runs in results.items():
        def med(key: str, runs: list[dict[str, float]] = runs) -> float:
            return statistics.median(x[key] for x in runs)

        mb_s = med("mb_s")
        # Every core busy with this write alone: JVM + its Python workers + three bookies.
        bound = cores / (med("jvm") + med("python") + 3 * med("bookie"))
        print(f"| {name:<9} | {mb_s:>7,.1f} | {mb_s / third:>10.2f} | {mb_s / null:>10.2f} | {med('jvm') * 1e3:>9.2f} | "
              f"{med('python') * 1e3:>12.2f} | {med('bookie') * 1e3:>12.2f} | {bound:>14,.0f} |")
    print("bookie ms/MB: per bookie (of parquet and nullsink: the idle bookies' own work during those runs); "
          f"CPU-bound MB/s: {cores} cores / (JVM + Python + 3 x bookie), what the write would reach with every "
          "core its own")


if __name__ == "__main__":
    main()
