"""Streaming pipeline: a Python producer appends events to a log; a Spark streaming query reads
them, enriches them and writes them to another log exactly once; a tailing reader measures the
end-to-end latency (producer append -> visible in the output log) and where it goes.

    python3 examples/streaming_pipeline.py [--events 2000] [--rate 200] [--metadata-uri URI]
                                           [--zookeeper] [--trigger-ms N] [--max-entries-per-trigger N]

Without --metadata-uri it starts a local cluster (3 bookies; embedded metadata, or with --zookeeper
a local ZooKeeper) and removes it at exit. The breakdown says, per event, how long it waited for
its micro-batch to start, how long the batch's planning, reading, writing and the sink's commit
took, and how long the output took to reach the reader; docs/spark.md ("Latency") reads it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, LongType, StructField, StructType

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.local_cluster import LocalCluster, local_spark_session
from pyspark_ledger.testing.zookeeper_server import LocalZooKeeper

EVENT = StructType([StructField("id", LongType()), StructField("ts", DoubleType())])
WARMUP_EVENTS = 20
# The query's phases before its job (addBatch), in the order a micro-batch runs them.
PLANNING_KEYS = ("latestOffset", "walCommit", "getBatch", "queryPlanning")
PHASES = ("waiting for the trigger", "planning", "reading", "writing", "sink commit", "delivery to the reader")


@dataclass
class Seen:
    """One output event: the producer's append time, the source position it was read at, the
    row's time in the query (the JVM's clock between reading and writing), the sink ledger's seq
    and when the tailing reader saw it."""

    appended: float
    source: tuple[int, int]
    in_query: float
    sink_seq: int
    seen: float


def produce(client: LedgerClient, log: str, events: int, rate: float, started: threading.Event,
            warmed_up: threading.Event, produced_in_s: list[float]) -> None:
    with client.open_log_writer(log, rollover_entries=5_000) as writer:
        started.set()
        # A few events first, so that the query's first micro-batch (Python workers starting,
        # the JVM warming up) is not part of the measurement.
        for i in range(WARMUP_EVENTS):
            writer.append(json.dumps({"id": -1 - i, "ts": time.time()}).encode())
        warmed_up.wait(120)
        t0 = time.monotonic()
        pending = []  # appended without waiting for each acknowledgement, so the rate holds
        for i in range(events):
            pending.append(writer.append_async(json.dumps({"id": i, "ts": time.time()}).encode()))
            delay = t0 + (i + 1) / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        produced_in_s[0] = time.monotonic() - t0
        for f in pending:
            f.result(timeout=120)


def start_query(spark: Any, uri: str, source: str, sink: str, work: Path, args: argparse.Namespace) -> Any:
    reader = spark.readStream.format("ledger").option("metadataServiceUri", uri).option("log", source)
    if args.max_entries_per_trigger:
        reader = reader.option("maxEntriesPerTrigger", str(args.max_entries_per_trigger))
    raw = reader.load()
    enriched = (
        raw.select(F.from_json(F.col("payload").cast("string"), EVENT).alias("e"), "seq", "entry")
        .select(F.to_json(F.struct(
            F.col("e.id"), F.col("e.ts"), F.lit("enriched").alias("stage"),
            F.col("seq").alias("src_seq"), F.col("entry").alias("src_entry"),
            # The row's own timestamp, per row in the JVM, between the read and the write.
            F.expr("cast(reflect('java.lang.System', 'currentTimeMillis') as long)").alias("in_query_ms"),
        )).alias("json"))
        .select(F.col("json").cast("binary").alias("payload"))
    )
    writer = (enriched.writeStream.format("ledger").option("metadataServiceUri", uri).option("log", sink)
              .option("checkpointLocation", str(work / "checkpoint")))
    if args.trigger_ms is not None:
        writer = writer.trigger(processingTime=f"{args.trigger_ms} milliseconds")
    return writer.start()


def run(uri: str, args: argparse.Namespace, work: Path) -> None:
    source, sink = "events", "events_enriched"
    # Enough progress events kept for the breakdown (Spark keeps 100 by default).
    spark = local_spark_session("ledger-streaming-pipeline", conf={"spark.sql.streaming.numRecentProgressUpdates": "100000"})
    with LedgerClient(uri) as client:
        client.open_log_writer(source).close()  # the source log must exist before the query starts
        query = start_query(spark, uri, source, sink, work, args)
        started, warmed_up = threading.Event(), threading.Event()
        produced_in_s = [0.0]
        producer = threading.Thread(target=produce, args=(client, source, args.events, args.rate, started, warmed_up,
                                                          produced_in_s))
        producer.start()
        started.wait(30)
        while sink not in client.list_logs():
            time.sleep(0.1)
        seen = follow(client, sink, args.events, warmed_up)
        producer.join()
        if not seen:
            query.stop()
            spark.stop()
            raise SystemExit("no event reached the output log within 60 s: the query failed (its error is above)")
        progress = finished_progress(query, max(s.source for s in seen.values()))
        query.stop()
        spark.stop()
        sink_times = sink_ledger_times(client, sink)
    print(f"\nproduced {args.events} events in {produced_in_s[0]:.1f} s ({args.events / produced_in_s[0]:.0f} events/s)")
    report(args, seen, progress, sink_times)


def finished_progress(query: Any, last: tuple[int, int], timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """The query's progress events, once one covers the last source position: the reader sees a
    batch's output at the sink's commit, before Spark ends the batch and posts its progress."""
    deadline = time.monotonic() + timeout_s
    while True:
        progress = [json.loads(p.json) if hasattr(p, "json") else p for p in query.recentProgress]
        if any(last < _end(p) for p in progress if p.get("numInputRows")) or time.monotonic() > deadline:
            return progress
        time.sleep(0.1)


def _end(p: dict[str, Any]) -> tuple[int, int]:
    """A micro-batch's end offset in the source log: the position after the last entry it read."""
    end = p["sources"][0]["endOffset"]
    pos = (json.loads(end) if isinstance(end, str) else end)["events"]
    return pos["seq"], pos["entry"]


def follow(client: LedgerClient, sink: str, events: int, warmed_up: threading.Event) -> dict[int, Seen]:
    seen: dict[int, Seen] = {}
    warm = 0
    for entry in client.open_log_reader(sink).tail(idle_timeout_s=60):
        now = time.time()
        event = json.loads(entry.payload)
        if event["id"] < 0:
            warm += 1
            if warm == WARMUP_EVENTS:
                warmed_up.set()
            continue
        assert event["id"] not in seen, f"event {event['id']} arrived twice"
        seen[event["id"]] = Seen(event["ts"], (event["src_seq"], event["src_entry"]), event["in_query_ms"] / 1000,
                                 entry.position.seq, now)
        if len(seen) == events:
            break
    return seen


def sink_ledger_times(client: LedgerClient, sink: str) -> dict[int, tuple[float, float]]:
    """Per sink ledger (by seq): when its write task sealed it, and when the commit appended it."""
    out = {}
    for lg in client.describe_log(sink).ledgers:
        sealed_ms = client.ledger_metadata(lg.ledger_id).seal_time_ms
        out[lg.seq] = ((sealed_ms if sealed_ms is not None else lg.ctime_ms) / 1000, lg.ctime_ms / 1000)
    return out


def _batch_of(progress: list[dict[str, Any]], source: tuple[int, int]) -> dict[str, Any]:
    """The micro-batch that read `source`: the first whose end offset is past it."""
    for p in progress:
        if source < _end(p):
            return p
    raise AssertionError(f"no micro-batch read source position {source}")


def phases(seen: dict[int, Seen], progress: list[dict[str, Any]],
           sink_times: dict[int, tuple[float, float]]) -> dict[str, list[float]]:
    """Per event, seconds in each phase; they add up to its end-to-end latency."""
    batches = sorted((p for p in progress if p.get("numInputRows")), key=lambda p: p["batchId"])
    out: dict[str, list[float]] = {name: [] for name in (*PHASES, "end-to-end")}
    for s in seen.values():
        batch = _batch_of(batches, s.source)
        started = datetime.fromisoformat(batch["timestamp"].replace("Z", "+00:00")).timestamp()
        job_start = started + sum(batch["durationMs"].get(k, 0) for k in PLANNING_KEYS) / 1000
        sealed, joined = sink_times[s.sink_seq]
        marks = (s.appended, started, job_start, s.in_query, sealed, joined, s.seen)
        for name, a, b in zip(PHASES, marks[:-1], marks[1:], strict=True):
            out[name].append(b - a)
        out["end-to-end"].append(s.seen - s.appended)
    return out


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def report(args: argparse.Namespace, seen: dict[int, Seen], progress: list[dict[str, Any]],
           sink_times: dict[int, tuple[float, float]]) -> None:
    settings = (f"trigger {'default (back to back)' if args.trigger_ms is None else f'{args.trigger_ms} ms'}, "
                f"maxEntriesPerTrigger {args.max_entries_per_trigger or 'none'}, "
                f"metadata {'ZooKeeper' if args.zookeeper else 'given' if args.metadata_uri else 'embedded'}")
    e2e = sorted(s.seen - s.appended for s in seen.values())
    print(f"events produced: {args.events}, delivered: {len(seen)} (each exactly once); {settings}")
    print("end-to-end latency (append -> visible in the output log):")
    print(f"  p50 {statistics.median(e2e):.2f} s   p95 {_p(e2e, 0.95):.2f} s   max {e2e[-1]:.2f} s")
    print("where it goes, per event (seconds; the phases add up to the end-to-end latency):")
    print(f"  {'phase':<26}{'p50':>7}{'p95':>7}{'mean':>7}")
    for name, values in phases(seen, progress, sink_times).items():
        print(f"  {name:<26}{_p(values, 0.5):7.3f}{_p(values, 0.95):7.3f}{statistics.fmean(values):7.3f}")
    batches = [p for p in progress if p.get("numInputRows")]
    keys = (*PLANNING_KEYS, "addBatch", "commitOffsets", "triggerExecution")
    means = {k: statistics.fmean(p["durationMs"].get(k, 0) for p in batches) for k in keys}
    print(f"micro-batches with data: {len(batches)}, {statistics.fmean(p['numInputRows'] for p in batches):.0f} rows "
          "each on average; Spark's durationMs per batch (mean ms): "
          + ", ".join(f"{k} {v:.0f}" for k, v in means.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=2000)
    ap.add_argument("--rate", type=float, default=200.0, help="events per second")
    ap.add_argument("--metadata-uri", help="use an existing cluster instead of starting a local one")
    ap.add_argument("--trigger-ms", type=int, help="a processing-time trigger of this interval (default: "
                    "Spark's default trigger, each micro-batch as soon as the previous one ends)")
    ap.add_argument("--max-entries-per-trigger", type=int, help="the source's maxEntriesPerTrigger")
    ap.add_argument("--zookeeper", action="store_true",
                    help="the local cluster's metadata on a local ZooKeeper (Debian's) instead of the embedded store")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ledger-pipeline-") as tmp:
        if args.metadata_uri:
            run(args.metadata_uri, args, Path(tmp))
        elif args.zookeeper:
            with LocalZooKeeper(Path(tmp) / "zookeeper") as zk, \
                    LocalCluster(3, metadata_uri=zk.uri(), work_dir=Path(tmp) / "cluster") as cluster:
                run(cluster.metadata_uri, args, Path(tmp))
        else:
            with LocalCluster(3, work_dir=Path(tmp) / "cluster") as cluster:
                run(cluster.metadata_uri, args, Path(tmp))


if __name__ == "__main__":
    main()
