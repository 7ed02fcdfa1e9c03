"""Spark batch throughput of format("ledger") next to Parquet, in one run on one machine.

Starts 3 real bookies (embedded store, fsync on) and a local[2] SparkSession; ledgers are
written with E=3, W=3, A=2. The session is local_spark_session's, with the executor setting the
README recommends for reads (spark.executorEnv.MALLOC_ARENA_MAX=1; Parquet runs under it too).
The same cached DataFrame is written and read through the ledger source and as Parquet (local
disk, Spark's default snappy), side by side. Reads are forced in full with the `noop` sink (a
count() on Parquet would read only footers). Each figure is the median of --rounds timed runs
after one warm-up run (Python workers start on first use). The ledger's and Parquet's runs of
one workload alternate (ledger first in even rounds, Parquet first in odd ones), so a change in
the shared machine's load and the JVM's warming reach both alike; after every run an untimed
sync writes back what it left dirty, so no run is measured during the kernel's writeback of
the one before.

Workloads:
  arrow  N rows of (id bigint, payload binary(100)) as Arrow entries (arrowBatchRows rows each),
         read with no metadata column (metadataColumns=none) and with all six
  raw    M rows of payload binary(100), batched (message batches, entry format 3: the cluster
         setting message_batches is on), written against the same rows as Arrow entries (MB/s)
         and read back payload only (metadataColumns=none) against Parquet
  offloaded arrow  the arrow log offloaded to a local directory (docs/tiered-storage.md), read by
         format("ledger") (from the files, by row group, never a bookie) next to spark.read.parquet
         over the very same files
The load average of the machine is printed at the start and end of the timed runs.
The Arrow write is also timed against `nullsink` (bench/spark_timing.py), a Python data source
whose writer drops every Arrow batch it is handed: the ceiling of any write through a Python
data source on this machine (in that row the second column is nullsink's, not Parquet's).

"payload MB/s" counts the DataFrame's data bytes (8 + 100 per arrow row);
the stored bytes (Arrow IPC, after LZ4 if on) are printed too. The column "ratio" is ledger /
Parquet of the same run. The disk's own bound is measured in the same run, in the bookies'
directory (machine_speed.write_fsync_mb_s: sequential 1 MiB writes, each with fdatasync, as a
journal writes): three bookies on one disk store every byte three times, so the Arrow write is
also shown against a third of it. --data random makes payloads
incompressible (SHA-512 bytes); --data text makes them padded decimal ids (very compressible).

    python bench/spark_bench.py [--rows 2000000] [--raw-rows 1000000] [--rounds 3]
                                [--data random|text] [--compression lz4|none|zstd]
                                [--bookie-args '--entry-log-cache-mb 0']
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine_speed import machine_speed_line, write_fsync_mb_s
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from spark_timing import noop, payload_column, register_nullsink, timed_pair

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.offload.offloader import offload_pass
from pyspark_ledger.testing.local_cluster import LocalCluster, local_spark_session
from pyspark_ledger.testing.message_batches import set_message_batches

DISK_PROBES = 3
# Issue 22's acceptance: reads against Parquet's in the same run, writes against the disk.
# Issue 33's acceptance (the ratio column: ledger / Parquet, or / the Arrow write of the same rows).
TARGETS = {"arrow write": ">= 0.8 of disk / 3", "arrow read none": ">= 0.9 of Parquet",
           "arrow read all": ">= 0.6 of Parquet", "raw read": ">= 0.8 of Parquet", "raw write": ">= 0.8 of arrow",
           "offloaded arrow read": ">= 0.9 of Parquet"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--raw-rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--data", choices=("random", "text"), default="random")
    ap.add_argument("--compression", choices=("lz4", "none", "zstd"), default="lz4")
    ap.add_argument("--bookie-args", default="",
                    help="extra bookie options, space-separated (e.g. '--entry-log-cache-mb 0')")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)

    work = Path(tempfile.mkdtemp(prefix="spark-bench-"))
    # Before anything else runs: the disk alone. Single probes of this VM's disk range from 0.4
    # to 1.4 GB/s within minutes (a host cache absorbs bursts), so the median of three.
    disk_mb_s = statistics.median(write_fsync_mb_s(str(work)) for _ in range(DISK_PROBES))
    cluster = LocalCluster(3, work_dir=work / "cluster", bookie_args=args.bookie_args.split()).start()
    with LedgerClient(cluster.metadata_uri) as setting_client:
        set_message_batches(setting_client, True)  # raw writes batch (option batching's default)
    spark = local_spark_session("spark-bench")
    register_nullsink(spark)  # format("nullsink"): the ceiling of a write through a Python data source
    loads: list[tuple[float, float, float]] = []
    uri = cluster.metadata_uri
    opts = {"metadataServiceUri": uri, "ensembleSize": "3", "writeQuorumSize": "3", "ackQuorumSize": "2"}
    rows: list[tuple[str, str, str, str, str]] = []
    try:
        arrow_df = spark.range(args.rows, numPartitions=2).select(F.col("id"), payload_column(args.data).alias("payload")).cache()
        raw_df = spark.range(args.raw_rows, numPartitions=2).select(payload_column(args.data).alias("payload")).cache()
        arrow_df.count(), raw_df.count()
        arrow_bytes = args.rows * 108
        pq_arrow, pq_raw = str(work / "arrow.parquet"), str(work / "raw.parquet")

        def ledger_write(df: DataFrame, name: str, fmt: str) -> None:
            (df.write.format("ledger").options(**opts).option("log", name).option("payloadFormat", fmt)
             .option("arrowCompression", args.compression).mode("overwrite").save())

        def ledger_read(name: str, columns: str = "all") -> None:
            noop(spark.read.format("ledger").option("metadataServiceUri", uri).option("log", name)
                 .option("metadataColumns", columns).load())

        loads.append(os.getloadavg())
        t_aw, t_pw = timed_pair(lambda: ledger_write(arrow_df, "bench-arrow", "arrow"),
                                lambda: arrow_df.write.mode("overwrite").parquet(pq_arrow), args.rounds)
        # The same rows through a Python data source writer that drops them (spark_timing.NullSink):
        # what Spark's hand-over of Arrow batches to a Python worker allows any such write.
        t_aw2, t_nw = timed_pair(lambda: ledger_write(arrow_df, "bench-arrow", "arrow"),
                                 lambda: arrow_df.write.format("nullsink").mode("append").save(), args.rounds)
        t_arn, t_prn = timed_pair(lambda: ledger_read("bench-arrow", "none"), lambda: noop(spark.read.parquet(pq_arrow)),
                                  args.rounds)
        t_ar, t_pr = timed_pair(lambda: ledger_read("bench-arrow"), lambda: noop(spark.read.parquet(pq_arrow)), args.rounds)
        # Raw rows: batched (message batches, the default once the cluster allows them) against
        # the same rows written as Arrow entries, then read back payload only against Parquet.
        t_rw, t_raw = timed_pair(lambda: ledger_write(raw_df, "bench-raw", "raw"),
                                 lambda: ledger_write(raw_df, "bench-raw-arrow", "arrow"), args.rounds)
        raw_df.write.mode("overwrite").parquet(pq_raw)
        t_rr, t_prr = timed_pair(lambda: ledger_read("bench-raw", "none"), lambda: noop(spark.read.parquet(pq_raw)),
                                 args.rounds)
        loads.append(os.getloadavg())

        with LedgerClient(uri) as client:
            stored = client.describe_log("bench-arrow").size_bytes
            raw_rec = client.describe_log("bench-raw")
            # Tiered storage (docs/tiered-storage.md): the same Arrow history offloaded to a local
            # directory, read by format("ledger") (from the files, by row group) and as plain Parquet.
            offload_pass(client, store=f"file://{work / 'offload'}", logs=["bench-arrow"], everything=True)
        raw_entries = sum(lg.entry_count or 0 for lg in raw_rec.ledgers)
        t_or, t_po = timed_pair(lambda: ledger_read("bench-arrow", "none"),
                                lambda: noop(spark.read.parquet(f"file://{work / 'offload' / 'bench-arrow'}")),
                                args.rounds)
        pq_size = sum(f.stat().st_size for f in Path(pq_arrow).glob("*.parquet"))

        def mb(n: float, t: float) -> str:
            return f"{n / t / 1e6:,.1f} MB/s"

        def rps(n: float, t: float) -> str:
            return f"{n / t / 1e6:,.2f}M rows/s"

        def ratio(t_ledger: float, t_parquet: float) -> str:
            return f"{t_parquet / t_ledger:.2f}"  # ledger's throughput / the other's, from the same work's times

        disk_third = disk_mb_s / 3
        raw_bytes = args.raw_rows * 100
        rows = [
            ("arrow write (payload)", mb(arrow_bytes, t_aw), mb(arrow_bytes, t_pw), ratio(t_aw, t_pw), ""),
            ("arrow write / (disk / 3)", f"{arrow_bytes / t_aw / 1e6 / disk_third:.2f}", "", "", TARGETS["arrow write"]),
            ("arrow write / nullsink", mb(arrow_bytes, t_aw2), mb(arrow_bytes, t_nw), ratio(t_aw2, t_nw), ""),
            ("nullsink / (disk / 3)", f"{arrow_bytes / t_nw / 1e6 / disk_third:.2f}", "", "", "the ceiling"),
            ("arrow write (rows)", rps(args.rows, t_aw), rps(args.rows, t_pw), ratio(t_aw, t_pw), ""),
            ("arrow read, no metadata", rps(args.rows, t_arn), rps(args.rows, t_prn), ratio(t_arn, t_prn),
             TARGETS["arrow read none"]),
            ("arrow read, all 6 metadata", rps(args.rows, t_ar), rps(args.rows, t_pr), ratio(t_ar, t_pr),
             TARGETS["arrow read all"]),
            ("batched raw write / arrow", mb(raw_bytes, t_rw), mb(raw_bytes, t_raw), ratio(t_rw, t_raw),
             TARGETS["raw write"]),
            ("batched raw write (rows)", rps(args.raw_rows, t_rw), "", "", ""),
            ("batched raw read, payload", rps(args.raw_rows, t_rr), rps(args.raw_rows, t_prr), ratio(t_rr, t_prr),
             TARGETS["raw read"]),
            ("offloaded arrow read", rps(args.rows, t_or), rps(args.rows, t_po), ratio(t_or, t_po),
             TARGETS["offloaded arrow read"]),
            ("stored bytes (arrow)", f"{stored / 1e6:,.1f} MB", f"{pq_size / 1e6:,.1f} MB", "", ""),
            ("raw entries (batches)", f"{raw_entries:,}", "", "", f"{raw_rec.message_format}"),
        ]
    finally:
        spark.stop()
        cluster.close()
        shutil.rmtree(work, ignore_errors=True)

    print("\n" + machine_speed_line())
    print(f"local[2], 3 bookies (fsync on), E=3 W=3 A=2, {os.cpu_count()} cores; arrow: {args.rows:,} rows of "
          f"id + 100 B {args.data} payload, arrowCompression={args.compression}; raw: {args.raw_rows:,} entries of "
          f"100 B; median of {args.rounds} runs after a warm-up")
    print(f"disk: sequential 1 MiB write + fdatasync {disk_mb_s:,.0f} MB/s (median of {DISK_PROBES} probes), "
          f"a third of it {disk_mb_s / 3:,.0f} MB/s")
    print("load average (1, 5, 15 min) at the start and end of the timed runs: "
          + " / ".join(f"{a:.1f}, {b:.1f}, {c:.1f}" for a, b, c in loads))
    print(f"| {'workload':<27} | {'ledger':>18} | {'Parquet':>18} | {'ratio':>5} | {'target':>18} |")
    print(f"|{'-' * 29}|{'-' * 19}:|{'-' * 19}:|{'-' * 6}:|{'-' * 20}|")
    for name, ours, theirs, r, target in rows:
        print(f"| {name:<27} | {ours:>18} | {theirs:>18} | {r:>5} | {target:>18} |")

if __name__ == "__main__":
    main()
