"""Per-message times and headers through Spark (issue 32 item 4 acceptance): a LogWriter writes
10,000 messages with headers over LEDGER_STAMPS_SECONDS (20 s; 60 s in the long run) into one
ledger; every row read back (batch and stream) has its own timestamp and exact headers;
startingTimestamp=T in the middle returns exactly the rows from the first with a time at or
after T, in batch and streaming, and endingTimestamp stops before it; timestampSource=event
gives the event time where a message has one; a log written before per-message times (format 2,
ledgers without a seal time) still reads, with its ledger-level time. Raw writes take headers
from a `headers` column and event times from the column eventTimeColumn names."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.log import Position
from pyspark_ledger.testing.message_batches import set_message_batches
from pyspark_ledger.testing.stream_start import start_query

SECONDS = float(os.environ.get("LEDGER_STAMPS_SECONDS", "20"))
MESSAGES = 10_000
WAIT_S = 300.0


def write_paced(client: LedgerClient, name: str, n: int, seconds: float) -> list[Position]:
    """n messages with headers (one with a duplicate key), evenly over `seconds`, one ledger."""
    ticks = max(1, int(seconds * 20))
    handles = []
    start = time.monotonic()
    with client.open_log_writer(name) as w:
        for k in range(ticks):
            for i in range(k * n // ticks, (k + 1) * n // ticks):
                handles.append(w.append_async(b"payload-%05d" % i, timestamp=i if i % 3 == 0 else None,
                                              headers=[("i", b"%d" % i), ("dup", b"x"), ("dup", b"y")]))
            time.sleep(max(0.0, start + (k + 1) * seconds / ticks - time.monotonic()))
        w.flush()
        return [h.result(WAIT_S) for h in handles]


@pytest.fixture
def batches_on(client: LedgerClient) -> Iterator[None]:
    """The cluster setting message_batches on for one test, then back as it was: the Spark
    tests share one cluster, and the others expect their own setting."""
    before = client.cluster_settings.message_batches
    set_message_batches(client, True)
    try:
        yield
    finally:
        set_message_batches(client, before)


def ms(ts: object) -> int:
    return round(ts.timestamp() * 1000)  # type: ignore[attr-defined]  # a datetime from Spark


def reader(spark: SparkSession, uri: str, name: str, **opts: str):
    return spark.read.format("ledger").option("metadataServiceUri", uri).option("log", name).options(**opts)


def test_every_row_its_own_time_and_headers_and_a_start_by_time(spark: SparkSession, client: LedgerClient, uri: str,
                                                                  log_name: str, tmp_path: Path, batches_on: None) -> None:
    positions = write_paced(client, log_name, MESSAGES, SECONDS)
    assert len({p.ledger_id for p in positions}) == 1
    with client.open_log_reader(log_name) as r:
        entries = list(r.read())
    times = [e.timestamp_ms for e in entries]
    assert [e.position for e in entries] == positions and times == sorted(times)
    assert times[-1] - times[0] >= SECONDS * 1000 * 0.8  # spread over the run, message by message

    rows = reader(spark, uri, log_name, includeHeaders="true").load().orderBy("entry", "index").collect()
    assert [(r.entry, r["index"]) for r in rows] == [(p.entry_id, p.index) for p in positions]
    assert [ms(r.timestamp) for r in rows] == times
    assert [[(h.key, bytes(h.value)) for h in r.headers] for r in rows] == \
        [[("i", b"%d" % i), ("dup", b"x"), ("dup", b"y")] for i in range(MESSAGES)]

    events = reader(spark, uri, log_name, timestampSource="event", metadataColumns="entry,index,timestamp").load()
    got = [ms(r.timestamp) for r in events.orderBy("entry", "index").collect()]
    assert got == [i if i % 3 == 0 else t for i, t in enumerate(times)]

    t_mid = times[MESSAGES // 2]
    first = next(i for i, t in enumerate(times) if t >= t_mid)
    want = [(p.entry_id, p.index) for p in positions[first:]]
    assert 0 < first < MESSAGES
    from_t = reader(spark, uri, log_name, startingTimestamp=str(t_mid)).load().orderBy("entry", "index").collect()
    assert [(r.entry, r["index"]) for r in from_t] == want
    until_t = reader(spark, uri, log_name, endingTimestamp=str(t_mid)).load().count()
    assert until_t == first

    table = f"stamps_{log_name[2:]}"
    q = start_query(lambda: spark.readStream.format("ledger").option("metadataServiceUri", uri).option("log", log_name)
                    .option("startingTimestamp", str(t_mid)).option("includeHeaders", "true").load()
                    .writeStream.format("memory").queryName(table).option("checkpointLocation", str(tmp_path / "ckpt"))
                    .trigger(availableNow=True).start())
    assert q.awaitTermination(WAIT_S), "the AvailableNow query did not stop"
    streamed = spark.table(table).orderBy("entry", "index").collect()
    assert [(r.entry, r["index"]) for r in streamed] == want
    assert [ms(r.timestamp) for r in streamed] == times[first:]
    assert [r.headers[0].value for r in streamed] == [b"%d" % i for i in range(first, MESSAGES)]


def test_a_log_written_before_message_times_still_reads(spark: SparkSession, client: LedgerClient, uri: str,
                                                        log_name: str) -> None:
    with client.open_log_writer(log_name, batching=False, rollover_entries=4) as w:
        for i in range(12):
            w.append(b"old-%d" % i)
            time.sleep(0.01)
    client.logs.update_head(log_name, lambda r: dataclasses.replace(
        r, ledgers=tuple(dataclasses.replace(lg, sealed_ms=None) for lg in r.ledgers)))  # as an older release left it
    rec = client.describe_log(log_name)
    ctime = {lg.seq: lg.ctime_ms for lg in rec.ledgers}
    rows = reader(spark, uri, log_name, includeHeaders="true").load().orderBy("seq", "entry").collect()
    assert [bytes(r.payload) for r in rows] == [b"old-%d" % i for i in range(12)]
    assert [ms(r.timestamp) for r in rows] == [ctime[r.seq] for r in rows]
    assert all(r.headers == [] for r in rows)
    second = rec.ledgers[1]
    from_t = reader(spark, uri, log_name, startingTimestamp=str(second.ctime_ms)).load().collect()
    assert sorted(bytes(r.payload) for r in from_t) == sorted(b"old-%d" % i for i in range(4, 12))


def test_raw_writes_take_headers_and_event_times(spark: SparkSession, client: LedgerClient, uri: str,
                                                 log_name: str, batches_on: None) -> None:
    base = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    rows = [(b"p%d" % i, [("k", b"v%d" % i), ("k", b"w")] if i % 2 else [],
             base + dt.timedelta(milliseconds=i) if i % 3 else None) for i in range(300)]
    df = spark.createDataFrame(rows, "payload binary, headers array<struct<key:string,value:binary>>, ev timestamp")
    before = time.time_ns() // 1_000_000
    (df.repartition(1).write.format("ledger").option("metadataServiceUri", uri).option("log", log_name)
     .option("eventTimeColumn", "ev").mode("append").save())
    with client.open_log_reader(log_name) as r:
        got = list(r.read())
    want_ms = [int(base.timestamp() * 1000) + i if i % 3 else None for i in range(300)]
    assert [e.payload for e in got] == [p for p, _, _ in rows]
    assert [list(e.headers) for e in got] == [h for _, h, _ in rows]
    assert [e.event_time_ms for e in got] == want_ms
    assert all(e.append_time_ms is not None and e.append_time_ms >= before for e in got)
    back = reader(spark, uri, log_name, includeHeaders="true", timestampSource="event").load().orderBy("entry", "index")
    collected = back.collect()
    assert [ms(r.timestamp) for r in collected] == [w if w is not None else e.append_time_ms
                                                    for w, e in zip(want_ms, got)]
    assert [[(h.key, bytes(h.value)) for h in r.headers] for r in collected] == [h for _, h, _ in rows]
    unbatched = log_name + "-unbatched"
    with pytest.raises(Exception, match="need batched raw writes"):
        (df.write.format("ledger").option("metadataServiceUri", uri).option("log", unbatched)
         .option("batching", "false").option("eventTimeColumn", "ev").mode("append").save())
