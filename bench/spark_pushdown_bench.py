"""Filter pushdown's speed-up (option pushFilters=true) on a log of many ledgers, one run, one machine.

Issue 33's acceptance: on a log of 400 ledgers, `where(seq >= 390)` and a 2.5% time range read
at most 3% of the full scan's entries; the speed-up is at least 10x on 10M rows. The suite's
tests/spark/test_pushdown_spark.py checks the planned partitions and entries on a tiny log; this
bench times the same two queries on a log of real size.

The log is written by Spark as Arrow entries (id bigint + 100 B random payload, the workload of
spark_bench.py) in --jobs append jobs (default one) of --ledgers / --jobs partitions each: one
ledger per task, so --ledgers ledgers of --rows / --ledgers rows. A row's `timestamp` is its
entry's own append time (docs/spark.md), and each ledger records the earliest and latest of its
entries' (LogLedger.append_times_ms), which is what pushdown prunes a time range by. The time
range starts at the first entry of the ledger a quarter into the log and ends as late as it can
while it meets at most 2.5% of the ledgers (two tasks run at once, so neighbouring ledgers'
times overlap); its share of the log's time span is printed.

Each query is timed the same way with and without pushFilters (without it, Spark reads every
ledger and filters the rows itself: the full scan), as the median of --rounds alternating runs
after a warm-up of each; the query is an aggregate (count and sum of id) over the filtered rows,
so both runs must give identical figures (checked) while every row still crosses from the Python
worker into the JVM (a Python data source has no column pruning). Also printed: the partitions
each plans, and how long building the log took. The load average is printed at the start and
end of the timed runs.

    LEDGER_PUSHDOWN_ROWS=10000000 python bench/spark_pushdown_bench.py   # the acceptance size
    python bench/spark_pushdown_bench.py [--rows N] [--ledgers 400] [--jobs 1] [--rounds 3]

--rows defaults to LEDGER_PUSHDOWN_ROWS, else 1,000,000 (docs/contributing.md "Long runs").
"""

from __future__ import annotations

import argparse
import datetime as dt
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

from machine_speed import machine_speed_line
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import Filter, GreaterThanOrEqual, LessThanOrEqual
from spark_timing import payload_column

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.datasource.source import LedgerDataSource, LedgerPartition
from pyspark_ledger.testing.local_cluster import LocalCluster, local_spark_session

ROWS_VARIABLE = "LEDGER_PUSHDOWN_ROWS"
ROWS_DEFAULT = 1_000_000
LOG = "pushdown-bench"
TARGET_SPEEDUP = 10.0  # issue 33, on 10M rows
TARGET_SHARE = 0.03  # of the full scan's partitions


def build_log(spark: SparkSession, opts: dict[str, str], rows: int, ledgers: int, jobs: int) -> list[tuple[int, int]]:
    """Write the log (module doc); each ledger's recorded append times (ms), in log order."""
    assert ledgers % jobs == 0 and rows >= ledgers, (rows, ledgers, jobs)
    per_job = rows // jobs
    for j in range(jobs):
        n = per_job if j < jobs - 1 else rows - per_job * (jobs - 1)
        df = spark.range(j * per_job, j * per_job + n, numPartitions=ledgers // jobs)
        (df.select(F.col("id"), payload_column("random").alias("payload")).write.format("ledger").options(**opts)
         .option("payloadFormat", "arrow").mode("append").save())
    with LedgerClient(opts["metadataServiceUri"]) as client:
        rec = client.describe_log(LOG)
    assert len(rec.ledgers) == ledgers, (len(rec.ledgers), ledgers)
    bounds = [lg.append_times_ms for lg in rec.ledgers]
    assert all(b is not None for b in bounds), "a ledger without recorded append times"
    return [b for b in bounds if b is not None]


def time_window(bounds: list[tuple[int, int]], share: float) -> tuple[int, int, int]:
    """(lo, hi, ledgers met): from the first time of the ledger a quarter into the log, as late as
    it can end while it meets at most `share` of the ledgers (at least one)."""
    most = max(1, int(len(bounds) * share))
    lo = bounds[len(bounds) // 4][0]
    ends = sorted({b for _, b in bounds if b >= lo})

    def met(hi: int) -> int:
        return sum(a <= hi and b >= lo for a, b in bounds)

    hi = ends[0]
    for end in ends:
        if met(end) > most:
            break
        hi = end
    return lo, hi, met(hi)


def planned_entries(opts: dict[str, str], filters: list[Filter]) -> int:
    """The entries a read with these filters pushed plans (what its tasks read), from the reader."""
    source = LedgerDataSource({**opts, "pushFilters": "true"})
    reader = source.reader(source.schema())
    left = list(reader.pushFilters(filters))
    assert not left, f"filters left to Spark: {left}"
    return sum(p.range.entries for p in reader.partitions() if isinstance(p, LedgerPartition))


def utc(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


def timed_pair(pushed: Callable[[], tuple[int, int]], full: Callable[[], tuple[int, int]],
               rounds: int) -> tuple[float, float]:
    """Median seconds of each, alternating after a warm-up; both must return the same figures."""
    fns = (pushed, full)
    outs = [fn() for fn in fns]
    assert outs[0] == outs[1] and outs[0][0] > 0, f"pushed {outs[0]} != full scan {outs[1]}"
    times: tuple[list[float], list[float]] = ([], [])
    for r in range(rounds):
        for k in (0, 1) if r % 2 == 0 else (1, 0):
            start = time.perf_counter()
            assert fns[k]() == outs[0]
            times[k].append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=int(os.environ.get(ROWS_VARIABLE, ROWS_DEFAULT)))
    ap.add_argument("--ledgers", type=int, default=400)
    ap.add_argument("--jobs", type=int, default=1, help="append jobs that write the ledgers")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    work = Path(tempfile.mkdtemp(prefix="spark-pushdown-bench-"))
    cluster = LocalCluster(3, work_dir=work / "cluster").start()
    spark = local_spark_session("spark-pushdown-bench")
    opts = {"metadataServiceUri": cluster.metadata_uri, "log": LOG}
    results: list[tuple[str, int, int, float, float, int, int, int]] = []
    loads: list[tuple[float, float, float]] = []
    try:
        start = time.perf_counter()
        times = build_log(spark, opts, args.rows, args.ledgers, args.jobs)
        t_build = time.perf_counter() - start
        cut = args.ledgers * 39 // 40  # seq >= 390 of 400
        lo, hi, met = time_window(times, 0.025)
        span_ms = max(b for _, b in times) - min(a for a, _ in times)
        cases: list[tuple[str, Column, list[Filter]]] = [
            (f"seq >= {cut}", F.col("seq") >= cut, [GreaterThanOrEqual(("seq",), cut)]),
            (f"timestamp in {(hi - lo) / max(1, span_ms):.1%} of the time ({met} ledgers)",
             (F.col("timestamp") >= F.lit(utc(lo))) & (F.col("timestamp") <= F.lit(utc(hi))),
             [GreaterThanOrEqual(("timestamp",), utc(lo)), LessThanOrEqual(("timestamp",), utc(hi))]),
        ]
        full_entries = planned_entries(opts, [])

        def query(where: Column, push: bool) -> DataFrame:
            return (spark.read.format("ledger").options(**opts).option("pushFilters", str(push).lower()).load()
                    .where(where))

        def figures(where: Column, push: bool) -> Callable[[], tuple[int, int]]:
            def run() -> tuple[int, int]:
                row = query(where, push).agg(F.count("*"), F.sum("id")).collect()[0]
                return int(row[0]), int(row[1] or 0)
            return run

        loads.append(os.getloadavg())
        for name, where, filters in cases:
            parts = (query(where, True).rdd.getNumPartitions(), query(where, False).rdd.getNumPartitions())
            t_push, t_full = timed_pair(figures(where, True), figures(where, False), args.rounds)
            results.append((name, *parts, t_push, t_full, figures(where, True)()[0], planned_entries(opts, filters),
                            full_entries))
        loads.append(os.getloadavg())
    finally:
        spark.stop()
        cluster.close()
        shutil.rmtree(work, ignore_errors=True)

    print("\n" + machine_speed_line())
    print(f"local[2], 3 bookies; a log of {args.ledgers} ledgers, {args.rows:,} rows of id + 100 B random payload "
          f"(Arrow entries), written by {args.jobs} append job(s) in {t_build:.0f} s; median of {args.rounds} "
          "alternating runs after a warm-up; query: count and sum(id) of the rows kept")
    print("load average (1, 5, 15 min) at the start and end of the timed runs: "
          + " / ".join(f"{a:.1f}, {b:.1f}, {c:.1f}" for a, b, c in loads))
    print(f"| {'filter':<42} | {'rows kept':>10} | {'partitions':>12} | {'entries':>13} | {'pushed':>8} | "
          f"{'full scan':>9} | {'speed-up':>8} | target |")
    print(f"|{'-' * 44}|{'-' * 11}:|{'-' * 13}:|{'-' * 14}:|{'-' * 9}:|{'-' * 10}:|{'-' * 9}:|--------|")
    for name, p_push, p_full, t_push, t_full, kept, e_push, e_full in results:
        print(f"| {name:<42} | {kept:>10,} | {p_push:>5} / {p_full:<4} | {e_push:>6} / {e_full:<5} | {t_push:>6.2f} s | "
              f"{t_full:>7.2f} s | {t_full / t_push:>7.1f}x | >= {TARGET_SPEEDUP:.0f}x, <= {TARGET_SHARE:.0%} of "
              "partitions and entries |")

if __name__ == "__main__":
    main()
