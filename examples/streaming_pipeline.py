"""Streaming pipeline: a Python producer appends events to a log; a Spark streaming query reads
them, enriches them and writes them to another log exactly once; a tailing reader measures the
end-to-end latency (producer append -> visible in the output log).

    python3 examples/streaming_pipeline.py [--events 2000] [--rate 200] [--metadata-uri URI]

Without --metadata-uri it starts a local cluster (embedded metadata + 3 bookies) and removes it
at exit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, LongType, StructField, StructType

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.local_cluster import LocalCluster, local_spark_session

EVENT = StructType([StructField("id", LongType()), StructField("ts", DoubleType())])


WARMUP_EVENTS = 20


def produce(client: LedgerClient, log: str, events: int, rate: float, started: threading.Event,
            warmed_up: threading.Event) -> None:
    with client.open_log_writer(log, rollover_entries=5_000, batching=False) as writer:
        started.set()
        # A few events first, so that the query's first micro-batch (Python workers starting,
        # the JVM warming up) is not part of the measurement.
        for i in range(WARMUP_EVENTS):
            writer.append(json.dumps({"id": -1 - i, "ts": time.time()}).encode())
        warmed_up.wait(120)
        t0 = time.monotonic()
        for i in range(events):
            writer.append(json.dumps({"id": i, "ts": time.time()}).encode())
            delay = t0 + (i + 1) / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)


def run(uri: str, events: int, rate: float, work: Path) -> None:
    source, sink = "events", "events_enriched"
    spark = local_spark_session("ledger-streaming-pipeline")
    with LedgerClient(uri) as client:
        client.open_log_writer(source, batching=False).close()  # the source log must exist before the query starts
        raw = spark.readStream.format("ledger").option("metadataServiceUri", uri).option("log", source).load()
        enriched = (
            raw.select(F.from_json(F.col("payload").cast("string"), EVENT).alias("e"))
            .select(F.to_json(F.struct(F.col("e.id"), F.col("e.ts"), F.lit("enriched").alias("stage"))).alias("json"))
            .select(F.col("json").cast("binary").alias("payload"))
        )
        query = (enriched.writeStream.format("ledger").option("metadataServiceUri", uri).option("log", sink)
                 .option("checkpointLocation", str(work / "checkpoint")).start())  # default trigger
        started, warmed_up = threading.Event(), threading.Event()
        producer = threading.Thread(target=produce, args=(client, source, events, rate, started, warmed_up))
        producer.start()
        started.wait(30)
        while sink not in client.list_logs():
            time.sleep(0.1)
        latencies: list[float] = []
        seen: set[int] = set()
        reader = client.open_log_reader(sink)
        warm = 0
        for entry in reader.tail(idle_timeout_s=60):
            event = json.loads(entry.payload)
            if event["id"] < 0:
                warm += 1
                if warm == WARMUP_EVENTS:
                    warmed_up.set()
                continue
            latencies.append(time.time() - event["ts"])
            assert event["id"] not in seen, f"event {event['id']} arrived twice"
            seen.add(event["id"])
            if len(seen) == events:
                break
        producer.join()
        query.stop()
        spark.stop()
    latencies.sort()
    print(f"\nevents produced: {events}, delivered to {sink!r}: {len(seen)} (each exactly once)")
    print("end-to-end latency (append -> visible in the output log), default trigger:")
    print(f"  p50 {statistics.median(latencies):.2f} s   p95 {latencies[int(len(latencies) * 0.95) - 1]:.2f} s   "
          f"max {latencies[-1]:.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=2000)
    ap.add_argument("--rate", type=float, default=200.0, help="events per second")
    ap.add_argument("--metadata-uri", help="use an existing cluster instead of starting a local one")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ledger-pipeline-") as tmp:
        if args.metadata_uri:
            run(args.metadata_uri, args.events, args.rate, Path(tmp))
        else:
            with LocalCluster(3, work_dir=Path(tmp) / "cluster") as cluster:
                run(cluster.metadata_uri, args.events, args.rate, Path(tmp))


if __name__ == "__main__":
    main()
