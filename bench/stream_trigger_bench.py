"""What the stream source's driver side costs per trigger (stream_read.next_batch: scan each log
from the stream's position to its readable end, admission, lag), by how far behind the stream is,
on 3 real bookies and the embedded metadata store. No Spark: the driver's calls only.

Cases: a log of --ledgers sealed ledgers (--entries each) and an open last ledger (a LogWriter
still appending: its LAC is read from a quorum of bookies); the stream at the start (every
ledger behind), half way, and at the end (nothing new).

    python bench/stream_trigger_bench.py [--ledgers 1024] [--entries 5] [--runs 7]

Measured here (2 shared cores, 2026-11-26, 1024 x 5 + 3 entries of 100 B, 100 entries a trigger):
all behind 8-12 ms median, half behind 5 ms, at the end 2-4 ms; lag exact (5023 entries,
502,300 bytes with all behind). A trigger reads at most 16 segments of a log (SCAN_LEDGERS_MAX).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine_speed import machine_speed_line

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.datasource.options.source_options import parse_options
from pyspark_ledger.datasource.read.planning import shape_of
from pyspark_ledger.datasource.stream.admission import Limit
from pyspark_ledger.datasource.stream.offsets import LogOffset
from pyspark_ledger.datasource.stream.read import next_batch
from pyspark_ledger.testing.local_cluster import LocalCluster

LOG = "bench-stream"
LIMIT = Limit(max_entries=100)  # a stream that reads 100 entries per trigger


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ledgers", type=int, default=1024)
    ap.add_argument("--entries", type=int, default=5)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    print(machine_speed_line())
    with tempfile.TemporaryDirectory() as work, LocalCluster(3, work_dir=Path(work)) as cluster, \
            LedgerClient(cluster.metadata_uri) as client:
        t0 = time.monotonic()
        with client.open_log_writer(LOG, rollover_entries=args.entries, batching=False) as w:
            for f in [w.append_async(b"x" * 100) for _ in range(args.ledgers * args.entries)]:
                f.result(timeout=120)
        writer = client.open_log_writer(LOG, batching=False)  # an open last ledger with a few entries
        for _ in range(3):
            writer.append(b"y" * 100)
        print(f"log: {args.ledgers} sealed ledgers x {args.entries} entries + an open one "
              f"(made in {time.monotonic() - t0:.1f} s)")
        opts = parse_options({"metadataServiceUri": cluster.metadata_uri, "log": LOG})
        shape = shape_of(client, opts)
        rec = client.describe_log(LOG)
        half = rec.ledgers[len(rec.ledgers) // 2]
        tail = next_batch(client, opts, shape, {LOG: LogOffset(0, 0)}, Limit(), None).end[LOG]
        for label, at in (("all behind", LogOffset(rec.ledgers[0].seq, 0)),
                          ("half behind", LogOffset(half.seq, 0, half.ledger_id.qualified_name)),
                          ("at the end", tail)):
            times = []
            for _ in range(args.runs):
                t = time.perf_counter()
                batch = next_batch(client, opts, shape, {LOG: at}, LIMIT, None)
                times.append(time.perf_counter() - t)
            lag = batch.report()[LOG]
            print(f"{label:12s} next_batch median {statistics.median(times) * 1000:7.1f} ms "
                  f"(min {min(times) * 1000:.1f}, max {max(times) * 1000:.1f}); "
                  f"lagEntries={lag['lagEntries']} lagBytes={lag['lagBytes']}")
        writer.close()


if __name__ == "__main__":
    main()
