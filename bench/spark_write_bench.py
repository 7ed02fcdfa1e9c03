"""Spark batch write throughput of format("ledger") alone (raw and Arrow), for the write path.

Same setup as spark_bench.py (3 real bookies, embedded store, fsync on, local[2], E=3 W=3 A=2,
cached DataFrames), but only the writes, so a change to the write path is measured quickly.
Each figure is the median of --rounds timed runs after one warm-up, with an untimed sync after
each workload. --keys adds a 16-byte `key` column to both workloads.

    python bench/spark_write_bench.py [--rows 2000000] [--raw-rows 1000000] [--rounds 3]
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

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from spark_timing import payload_column

from pyspark_ledger.testing.local_cluster import LocalCluster, local_spark_session


def timed(fn: Callable[[], None], rounds: int) -> list[float]:
    fn()  # warm-up: Python workers, page cache
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    os.sync()
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--raw-rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--data", choices=("random", "text"), default="random")
    ap.add_argument("--keys", action="store_true")
    ap.add_argument("--only", choices=("raw", "arrow", "both"), default="both")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    work = Path(tempfile.mkdtemp(prefix="spark-write-bench-"))
    cluster = LocalCluster(3, work_dir=work / "cluster").start()
    spark = local_spark_session("spark-write-bench")
    opts = {"metadataServiceUri": cluster.metadata_uri, "ensembleSize": "3", "writeQuorumSize": "3", "ackQuorumSize": "2"}
    lines = []
    try:
        key = [F.expr("cast(lpad(cast(id % 1000 as string), 16, 'k') as binary)").alias("key")] if args.keys else []
        arrow_df = spark.range(args.rows, numPartitions=2).select(
            *key, F.col("id"), payload_column(args.data).alias("payload")).cache()
        raw_df = spark.range(args.raw_rows, numPartitions=2).select(*key, payload_column(args.data).alias("payload")).cache()
        arrow_df.count(), raw_df.count()

        def write(df: DataFrame, name: str, fmt: str) -> None:
            df.write.format("ledger").options(**opts).option("log", name).option("payloadFormat", fmt) \
                .mode("overwrite").save()

        if args.only in ("arrow", "both"):
            t = timed(lambda: write(arrow_df, "wb-arrow", "arrow"), args.rounds)
            m = statistics.median(t)
            lines.append(f"arrow write: {args.rows * 108 / m / 1e6:,.1f} MB/s payload, {args.rows / m / 1e6:,.2f}M rows/s "
                         f"(runs {', '.join(f'{x:.2f}' for x in t)} s)")
        if args.only in ("raw", "both"):
            t = timed(lambda: write(raw_df, "wb-raw", "raw"), args.rounds)
            m = statistics.median(t)
            lines.append(f"raw write:   {args.raw_rows / m / 1e6:,.3f}M rows/s of 100 B entries "
                         f"(runs {', '.join(f'{x:.2f}' for x in t)} s)")
    finally:
        spark.stop()
        cluster.close()
        shutil.rmtree(work, ignore_errors=True)
    print(f"local[2], 3 bookies (fsync on), E=3 W=3 A=2, {os.cpu_count()} cores, data={args.data}, keys={args.keys}, "
          f"median of {args.rounds} after a warm-up")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
