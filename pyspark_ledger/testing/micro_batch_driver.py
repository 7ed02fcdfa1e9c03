"""A streaming driver process that runs a log -> log query for a number of micro-batches and
reports what each trigger cost and how many metadata sessions each Python process opened: for
tests/spark/test_client_sessions.py and bench/spark_client_cache_bench.py (the per-worker client
cache on and off). `run_micro_batches` starts it with LEDGER_SPARK_CLIENT_CACHE and
LEDGER_SPARK_CLIENT_AUDIT_DIR in its environment, which reaches every Python process of its
Spark (the driver's planners, the sink's commit runners, the executors' workers), and appends to
the source log meanwhile (every trigger needs new entries to make a batch).

    python -m pyspark_ledger.testing.micro_batch_driver URI SOURCE_LOG SINK_LOG CHECKPOINT_DIR BATCHES TRIGGER

The last line of its output is a JSON list: the durationMs of every micro-batch that read rows.
It waits on progress, never on a deadline: it gives up only when no batch completes for
STALL_S seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from pyspark_ledger.testing.stream_start import SPARK_WORKER_START_FAILURE, is_worker_start_failure

STALL_S = 300.0  # no batch for this long: the query is stuck, not slow
POLL_S = 0.5


def main() -> None:
    from pyspark.sql import functions as F

    from pyspark_ledger.testing.local_cluster import local_spark_session

    uri, source, sink, checkpoint, batches_s, trigger = sys.argv[1:7]
    batches = int(batches_s)
    assert batches >= 1, "BATCHES must be at least 1"
    spark = local_spark_session("micro-batch-driver", log_level="ERROR",
                                conf={"spark.sql.streaming.numRecentProgressUpdates": str(batches + 50)})
    src = spark.readStream.format("ledger").option("metadataServiceUri", uri).option("log", source).load()
    out = src.select(F.concat(F.col("payload"), F.lit(bytearray(b"!"))).alias("payload"))
    query = (out.writeStream.format("ledger").option("metadataServiceUri", uri).option("log", sink)
             .option("checkpointLocation", checkpoint).trigger(processingTime=trigger).start())
    print("STARTED", flush=True)
    done: list[dict[str, int]] = []
    last_change, seen = time.monotonic(), -1
    try:
        for _ in range(int((batches + 10) * 3600 / POLL_S)):  # bounded; the stall check ends it first
            done = [p["durationMs"] for p in query.recentProgress if p["numInputRows"] > 0]
            if len(done) >= batches:
                break
            if query.exception() is not None:
                raise RuntimeError(f"the query failed: {query.exception()}")
            if len(done) != seen:
                seen, last_change = len(done), time.monotonic()
            elif time.monotonic() - last_change > STALL_S:
                raise RuntimeError(f"no micro-batch for {STALL_S:.0f} s after {len(done)} of {batches}")
            time.sleep(POLL_S)
    finally:
        query.stop()
        spark.stop()
    print(json.dumps(done[:batches]), flush=True)


FEED_INTERVAL_S = 0.1
DRIVER_TIMEOUT_S = 3600.0  # a backstop only: the driver stops itself when no batch completes for STALL_S


@dataclass(frozen=True)
class MicroBatchRun:
    sessions: dict[int, int]  # pid -> metadata sessions that process opened
    durations: list[dict[str, int]]  # each micro-batch's durationMs (Spark's progress)


# Spark's ~10 s bound for a new Python worker to connect back (stream_start.py says more): a run
# that failed on it before any of this package's code ran is started again (a new log pair and checkpoint).
DRIVER_STARTS_MAX = 3


def run_micro_batches(uri: str, work: Path, name: str, batches: int, *, cache: bool,
                      trigger: str = "1 second") -> MicroBatchRun:
    """Run the driver for `batches` micro-batches while a thread appends to its source log."""
    for attempt in range(DRIVER_STARTS_MAX):
        try:
            return _run_once(uri, work, f"{name}-{attempt}", batches, cache=cache, trigger=trigger)
        except RuntimeError as exc:
            if not is_worker_start_failure(str(exc)) or attempt + 1 == DRIVER_STARTS_MAX:
                raise
    raise AssertionError("unreachable")


def _run_once(uri: str, work: Path, name: str, batches: int, *, cache: bool, trigger: str) -> MicroBatchRun:
    from pyspark_ledger.client import LedgerClient
    from pyspark_ledger.datasource import clients

    audit = work / f"audit-{name}"
    audit.mkdir(parents=True)
    env = dict(os.environ, **{clients.AUDIT_ENV: str(audit), clients.CACHE_ENV: "1" if cache else "0"})
    source, sink = f"mb-src-{name}", f"mb-sink-{name}"
    stop = threading.Event()

    def feed() -> None:
        with LedgerClient(uri) as c, c.open_log_writer(source, batching=False) as w:
            for i in range(10_000_000):  # bounded; stopped when the driver is done
                w.append(f"event {i}".encode())
                if stop.wait(FEED_INTERVAL_S):
                    return

    feeder = threading.Thread(target=feed, name="micro-batch-feeder", daemon=True)
    feeder.start()
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pyspark_ledger.testing.micro_batch_driver", uri, source, sink,
             str(work / f"checkpoint-{name}"), str(batches), trigger],
            env=env, capture_output=True, text=True, timeout=DRIVER_TIMEOUT_S)
    finally:
        stop.set()
        feeder.join(timeout=60)
    if out.returncode != 0:
        tail = out.stderr[-4000:]
        why = SPARK_WORKER_START_FAILURE if is_worker_start_failure(out.stderr) else ""
        raise RuntimeError(f"the micro-batch driver failed: {why}\n{tail}")
    sessions = {int(f.name): len(f.read_text().splitlines()) for f in audit.iterdir()}
    return MicroBatchRun(sessions, json.loads(out.stdout.strip().splitlines()[-1]))


if __name__ == "__main__":
    main()
