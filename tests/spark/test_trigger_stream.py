"""minEntriesPerTrigger / maxTriggerDelay on a real stream (issue 32 item 5): a slow producer
(about 50 entries/s) and a stream with minEntriesPerTrigger=1000, maxTriggerDelay=5s read
every entry once, in micro-batches that hold at least 1000 entries or start at least about 5 s
after the previous one (the source's own decisions are tested exactly, on a fake clock, in
test_trigger_gate.py); then a burst of 1500 goes at once, without waiting for the delay."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.stream_start import start_query

MIN_ENTRIES, DELAY_S = 1000, 5.0
SLOW_ENTRIES, SLOW_S = 600, 12.0
BURST = 1500
FEW = 30  # under minEntriesPerTrigger: what Trigger.Once and AvailableNow must still read
WAIT_S = 300.0  # progress bounds: generous, the machine is shared
# Spark's trigger timestamps come from the JVM, the delay from the source's clock: a trigger's
# own planning can move the observed gap by a fraction of a second either way.
GAP_SLACK_S = 1.0


def test_small_batches_wait_for_the_delay_and_a_burst_goes_at_once(spark: SparkSession, client: LedgerClient, uri: str,
                                                                    log_name: str, tmp_path: Path) -> None:
    writer = client.open_log_writer(log_name, batching=False)
    df = (spark.readStream.format("ledger").option("metadataServiceUri", uri).option("log", log_name)
          .option("minEntriesPerTrigger", str(MIN_ENTRIES)).option("maxTriggerDelay", f"{DELAY_S:g}s").load())
    table = f"trig_{log_name[2:]}"
    query = start_query(lambda: df.writeStream.format("memory").queryName(table)
                        .option("checkpointLocation", str(tmp_path / "ckpt"))
                        .trigger(processingTime="200 milliseconds").start())
    try:
        deadline = time.monotonic() + WAIT_S
        while query.lastProgress is None and time.monotonic() < deadline:  # the first trigger ran: the delay runs
            time.sleep(0.2)

        def slow() -> None:
            for i in range(SLOW_ENTRIES):
                writer.append_async(b"slow-%05d" % i)
                time.sleep(SLOW_S / SLOW_ENTRIES)

        producer = threading.Thread(target=slow)
        producer.start()
        producer.join(WAIT_S)
        while spark.table(table).count() < SLOW_ENTRIES and time.monotonic() < deadline:
            time.sleep(0.5)
        slow_batches = [p for p in query.recentProgress if p["numInputRows"]]
        for i in range(BURST):
            writer.append_async(b"burst-%05d" % i)
        burst_written = time.monotonic()
        while spark.table(table).count() < SLOW_ENTRIES + BURST and time.monotonic() < deadline:
            time.sleep(0.2)
        burst_seen_s = time.monotonic() - burst_written
        rows = [r.payload for r in spark.table(table).select("payload").collect()]
    finally:
        query.stop()
        writer.close()
    assert sorted(rows) == sorted([b"slow-%05d" % i for i in range(SLOW_ENTRIES)] +
                                  [b"burst-%05d" % i for i in range(BURST)]) and len(set(rows)) == len(rows)
    starts = [_epoch_s(p["timestamp"]) for p in slow_batches]
    sizes = [p["numInputRows"] for p in slow_batches]
    print(f"\nslow phase micro-batches: sizes {sizes}, gaps {[round(b - a, 2) for a, b in zip(starts, starts[1:])]} s; "
          f"the burst was read {burst_seen_s:.1f} s after it was written")
    # Without the gate, a 200 ms trigger over a 50/s producer makes about 60 batches of about 10.
    assert 2 <= len(sizes) <= SLOW_S / DELAY_S + 2, sizes
    for prev, start, n in zip(starts, starts[1:], sizes[1:]):
        assert n >= MIN_ENTRIES or start - prev >= DELAY_S - GAP_SLACK_S, (sizes, starts)


def _epoch_s(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


@pytest.mark.parametrize("trigger", [{"once": True}, {"availableNow": True}])
def test_once_and_available_now_read_everything_despite_min_entries(
        spark: SparkSession, client: LedgerClient, uri: str, log_name: str, tmp_path: Path,
        trigger: dict[str, bool]) -> None:
    """Trigger.Once and Trigger.AvailableNow read all there is at once, as Kafka's source does
    (minOffsetsPerTrigger does not apply to them): 30 entries under minEntriesPerTrigger=1000
    with an hour's delay are read by the one run, not held back to an empty one."""
    with client.open_log_writer(log_name, batching=False) as writer:
        for i in range(FEW):
            writer.append(b"few-%03d" % i)
    df = (spark.readStream.format("ledger").option("metadataServiceUri", uri).option("log", log_name)
          .option("minEntriesPerTrigger", str(MIN_ENTRIES)).option("maxTriggerDelay", "1h").load())
    table = f"once_{log_name[2:]}"
    query = start_query(lambda: df.writeStream.format("memory").queryName(table)
                        .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(**trigger).start())
    try:
        assert query.awaitTermination(WAIT_S), f"the {trigger} query did not end within {WAIT_S} s"
        rows = sorted(r.payload for r in spark.table(table).select("payload").collect())
    finally:
        query.stop()
    assert rows == [b"few-%03d" % i for i in range(FEW)]
