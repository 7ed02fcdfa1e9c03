"""spark_bench.py's read rows only, this tree against another (a `git worktree` of the code before
a change), each run a child process with its tree first on PYTHONPATH (so its bookies and Spark
workers run that tree too), trees alternating run by run. Each child starts 3 bookies and a
local[2] session, writes the rows once (untimed), then times the read rows against Parquet as
spark_bench does (median of --rounds alternating runs after a warm-up). Ratios are within a
child (ledger / Parquet, same minutes); the table gives each tree's median ratio over its runs,
and the same for the CPU the runs cost (Spark's JVM, its Python workers and the bookies, from
/proc: what a loaded shared machine changes least).

    git worktree add --detach /tmp/before main
    python bench/spark_read_ab.py --before /tmp/before [--runs 2] [--rows 1000000] [--raw-rows 500000]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHILD_TIMEOUT_S = 1800
ROWS = ("arrow read none", "arrow read all", "raw read")


def child(rows: int, raw_rows: int, rounds: int) -> None:
    import shutil
    import tempfile

    from pyspark.sql import functions as F
    from spark_timing import noop, payload_column, timed_pair_cpu

    import pyspark_ledger
    from pyspark_ledger.client import LedgerClient
    from pyspark_ledger.testing.local_cluster import LocalCluster, local_spark_session
    from pyspark_ledger.testing.message_batches import set_message_batches

    work = Path(tempfile.mkdtemp(prefix="spark-read-ab-"))
    cluster = LocalCluster(3, work_dir=work / "cluster").start()
    spark = None
    try:
        with LedgerClient(cluster.metadata_uri) as setting_client:
            set_message_batches(setting_client, True)
        spark = local_spark_session("spark-read-ab")
        uri = cluster.metadata_uri
        opts = {"metadataServiceUri": uri, "ensembleSize": "3", "writeQuorumSize": "3", "ackQuorumSize": "2"}
        arrow_df = spark.range(rows, numPartitions=2).select(F.col("id"), payload_column("random").alias("payload"))
        raw_df = spark.range(raw_rows, numPartitions=2).select(payload_column("random").alias("payload"))
        pq_arrow, pq_raw = str(work / "arrow.parquet"), str(work / "raw.parquet")
        for df, name, fmt, pq in ((arrow_df, "ab-arrow", "arrow", pq_arrow), (raw_df, "ab-raw", "raw", pq_raw)):
            (df.write.format("ledger").options(**opts).option("log", name).option("payloadFormat", fmt)
             .option("arrowCompression", "lz4").mode("overwrite").save())
            df.write.mode("overwrite").parquet(pq)

        def ledger_read(name: str, columns: str) -> None:
            noop(spark.read.format("ledger").option("metadataServiceUri", uri).option("log", name)
                 .option("metadataColumns", columns).load())

        def parquet_read(path: str) -> None:
            noop(spark.read.parquet(path))

        load0 = os.getloadavg()
        got, cpu = {}, {}
        for row, name, cols, pq in (("arrow read none", "ab-arrow", "none", pq_arrow),
                                    ("arrow read all", "ab-arrow", "all", pq_arrow),
                                    ("raw read", "ab-raw", "none", pq_raw)):
            pair = timed_pair_cpu(functools.partial(ledger_read, name, cols), functools.partial(parquet_read, pq), rounds)
            got[row] = (pair["ours_s"], pair["theirs_s"])
            cpu[row] = (pair["ours_cpu"], pair["theirs_cpu"])
        print(json.dumps({"where": pyspark_ledger.__file__, "got": got, "cpu": cpu, "load": [load0, os.getloadavg()]}))
    finally:
        if spark is not None:
            spark.stop()
        cluster.close()
        shutil.rmtree(work, ignore_errors=True)


def run_child(tree: Path, args: argparse.Namespace) -> dict[str, object]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--rows", str(args.rows),
           "--raw-rows", str(args.raw_rows), "--rounds", str(args.rounds)]
    out = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{tree}: {out.stderr[-3000:]}")
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    if not str(result["where"]).startswith(str(tree)):
        raise RuntimeError(f"the run meant for {tree} imported {result['where']}")
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path)
    ap.add_argument("--after", type=Path, default=HERE.parent)
    ap.add_argument("--runs", type=int, default=2, help="child runs per tree, alternating")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--raw-rows", type=int, default=500_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.rows, args.raw_rows, args.rounds)
        return
    if args.before is None:
        ap.error("--before is required")
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    ratios: dict[tuple[str, str], list[float]] = {}
    cpu_ratios: dict[tuple[str, str], list[float]] = {}
    for r in range(args.runs):
        for name in ("before", "after") if r % 2 == 0 else ("after", "before"):
            res = run_child(trees[name], args)
            got = res["got"]
            assert isinstance(got, dict)
            line = []
            for row in ROWS:
                ours, theirs = got[row]
                ratios.setdefault((name, row), []).append(theirs / ours)
                line.append(f"{row} {ours:.2f}s/{theirs:.2f}s={theirs / ours:.2f}")
                cpu = res.get("cpu")
                if isinstance(cpu, dict):
                    ours_cpu, theirs_cpu = cpu[row]
                    cpu_ratios.setdefault((name, row), []).append(theirs_cpu / ours_cpu)
                    line.append(f"(CPU {ours_cpu:.2f}/{theirs_cpu:.2f}={theirs_cpu / ours_cpu:.2f})")
            print(f"run {r} {name:<6} " + "  ".join(line) + f"  load {res['load']}", flush=True)
    print(f"\nmedian ratio (ledger / Parquet, higher is faster), {args.rows:,} arrow rows, {args.raw_rows:,} raw rows:")
    for row in ROWS:
        b, a = statistics.median(ratios[("before", row)]), statistics.median(ratios[("after", row)])
        print(f"{row:<16} before {b:.2f}  after {a:.2f}  (runs: {ratios[('before', row)]} / {ratios[('after', row)]})")
    if cpu_ratios:
        print("\nmedian CPU ratio (Parquet's CPU seconds / the ledger read's, JVM + Python workers + bookies; "
              "what the wall ratio tends to on a quiet 2-core machine where both are CPU-bound):")
        for row in ROWS:
            b, a = statistics.median(cpu_ratios[("before", row)]), statistics.median(cpu_ratios[("after", row)])
            print(f"{row:<16} before {b:.2f}  after {a:.2f}  (runs: {cpu_ratios[('before', row)]} / "
                  f"{cpu_ratios[('after', row)]})")


if __name__ == "__main__":
    main()
