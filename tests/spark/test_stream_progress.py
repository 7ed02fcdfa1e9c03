"""Issue 22 item 3: streams over several logs, lag in the query's progress, admission control,
Trigger.AvailableNow, data loss between micro-batches, and what the sink reports."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.datasource.options.source_options import parse_options
from pyspark_ledger.datasource.read.planning import shape_of
from pyspark_ledger.datasource.stream.admission import Limit
from pyspark_ledger.datasource.stream.offsets import LogOffset
from pyspark_ledger.datasource.stream.plan import plan_batch
from pyspark_ledger.datasource.stream.read import available_now_target, initial_offsets, next_batch
from pyspark_ledger.datasource.stream.sink_progress import read_sink_progress
from pyspark_ledger.log import Position
from pyspark_ledger.testing.progress import await_query, query_running, wait_on_progress
from pyspark_ledger.testing.stream_start import start_query

PAYLOAD_BYTES = 11  # b"event-%05d"


def produce(client: LedgerClient, name: str, n: int, rollover: int = 100, first: int = 0, size: int = 0) -> None:
    """n entries in sealed ledgers of `rollover` entries (the writer closes): sizes known exactly."""
    with client.open_log_writer(name, rollover_entries=rollover, batching=False) as w:
        futures = [w.append_async(b"event-%05d" % i + b"x" * size) for i in range(first, first + n)]
        for f in futures:
            f.result(timeout=60)


def source(spark: SparkSession, uri: str, **opts: str) -> DataFrame:
    return spark.readStream.format("ledger").option("metadataServiceUri", uri).options(**opts).load()


def run_available_now(df: DataFrame, table: str, checkpoint: Path) -> StreamingQuery:
    """Into a memory table (a new query: the memory sink does not restart from a checkpoint)."""
    q = start_query(lambda: df.writeStream.format("memory").queryName(table)
                    .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    await_query(q)  # the AvailableNow query stops
    return q


def start_copy(df: DataFrame, uri: str, sink: str, checkpoint: Path) -> StreamingQuery:
    """Into a log (the ledger sink restarts from its checkpoint, exactly once)."""
    return start_query(lambda: df.select("payload").writeStream.format("ledger").option("metadataServiceUri", uri)
                       .option("log", sink).option("checkpointLocation", str(checkpoint))
                       .option("batching", "false")  # one row = one entry: counted
                       .trigger(availableNow=True).start())


def copy_available_now(df: DataFrame, uri: str, sink: str, checkpoint: Path) -> StreamingQuery:
    q = start_copy(df, uri, sink, checkpoint)
    await_query(q)  # the AvailableNow query stops
    return q


def failure(q: StreamingQuery) -> str:
    """The first line of the error that stops the query, after Spark's prefix naming the query."""
    with pytest.raises(StreamingQueryException) as err:
        await_query(q)
    first = str(err.value).splitlines()[0]
    prefix = f"[STREAM_FAILED] Query [id = {q.id}, runId = {q.runId}] terminated with exception: "
    assert first.startswith(prefix) and "Traceback" not in first, first
    return first[len(prefix):]


def entry_count(client: LedgerClient, name: str) -> int:
    return sum(lg.entry_count or 0 for lg in client.describe_log(name).ledgers)


def entries_before(client: LedgerClient, name: str, at: dict[str, Any]) -> int:
    """Entries of the log before a stream position (its sealed ledgers' counts)."""
    rec = client.describe_log(name)
    return sum(lg.entry_count or 0 for lg in rec.ledgers if lg.seq < at["seq"]) + \
        sum(at["entry"] for lg in rec.ledgers if lg.seq == at["seq"])


def test_lag_in_progress_is_what_was_written_minus_what_was_read(spark: SparkSession, client: LedgerClient, uri: str,
                                                                 log_name: str, tmp_path: Path) -> None:
    produce(client, log_name, 500)
    df = source(spark, uri, log=log_name, maxEntriesPerTrigger="120")
    for written in (500, 800):
        q = copy_available_now(df, uri, log_name + "-out", tmp_path / "ckpt")
        assert entry_count(client, log_name + "-out") == written
        progress = [p for p in q.recentProgress if p["numInputRows"] > 0]
        assert progress and all(p["numInputRows"] <= 120 for p in progress)
        for p in progress:
            src = p["sources"][0]
            assert src["latestOffset"] is not None
            latest = json.loads(src["latestOffset"])[log_name]
            read = entries_before(client, log_name, json.loads(src["endOffset"])[log_name])
            assert (latest["lagEntries"], latest["lagBytes"]) == (written - read, (written - read) * PAYLOAD_BYTES), p
            assert latest["seq"] == client.describe_log(log_name).next_seq  # the tail: after the last sealed ledger
        assert json.loads(progress[-1]["sources"][0]["latestOffset"])[log_name]["lagEntries"] == 0
        produce(client, log_name, 300, first=500)  # the writer runs ahead again; the second round reads it


def test_max_bytes_per_trigger_and_one_huge_entry(spark: SparkSession, client: LedgerClient, uri: str, log_name: str,
                                                  tmp_path: Path) -> None:
    produce(client, log_name, 200)
    q = run_available_now(source(spark, uri, log=log_name, maxBytesPerTrigger=str(30 * PAYLOAD_BYTES),
                                 maxEntriesPerTrigger="50"), f"bytes_{log_name[2:]}", tmp_path / "a")
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert max(sizes) == 30 and spark.table(f"bytes_{log_name[2:]}").count() == 200
    big = log_name + "-big"
    produce(client, big, 3, size=100_000)  # each entry larger than the byte limit
    q = run_available_now(source(spark, uri, log=big, maxBytesPerTrigger="1000"), f"big_{log_name[2:]}", tmp_path / "b")
    assert [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]][-1] == 1
    assert spark.table(f"big_{log_name[2:]}").count() == 3


def test_several_logs_with_their_own_starts(spark: SparkSession, client: LedgerClient, uri: str, log_name: str,
                                            tmp_path: Path) -> None:
    a, b, c = (f"{log_name}-{x}" for x in "abc")
    for name in (a, b, c):
        produce(client, name, 150)
    ledger1 = client.describe_log(a).ledgers[1]
    starts = {a: {"seq": ledger1.seq, "ledger": ledger1.ledger_id.qualified_name, "entry": 10}, b: "latest"}
    run_available_now(source(spark, uri, logs=f"{a},{b},{c}", startingPositions=json.dumps(starts)),
                      f"multi_{log_name[2:]}", tmp_path / "m")
    got = {r["log"]: r["count"] for r in spark.table(f"multi_{log_name[2:]}").groupBy("log").count().collect()}
    assert got == {a: 40, c: 150}  # a from seq 1 entry 10; b from its end; c from the start
    later = client.describe_log(a).next_seq
    time.sleep(0.01)  # a later millisecond than every ledger so far
    produce(client, a, 30, first=150)  # ledgers that joined the log after `since`
    since = client.describe_log(a).ledgers[-1].ctime_ms
    assert since > max(lg.ctime_ms for lg in client.describe_log(a).ledgers if lg.seq < later)
    run_available_now(source(spark, uri, logs=f"{a},{b}", startingTimestamp=str(since)), f"time_{log_name[2:]}",
                      tmp_path / "t")
    assert spark.table(f"time_{log_name[2:]}").count() == 30


def test_log_pattern_picks_up_a_log_that_appears_later(spark: SparkSession, client: LedgerClient, uri: str,
                                                       log_name: str, tmp_path: Path) -> None:
    first, later = f"{log_name}-p1", f"{log_name}-p2"
    produce(client, first, 50)
    table = f"pattern_{log_name[2:]}"
    q = start_query(lambda: source(spark, uri, logPattern=f"{log_name}-p.*").writeStream.format("memory")
                    .queryName(table).option("checkpointLocation", str(tmp_path / "p"))
                    .trigger(processingTime="200 milliseconds").start())
    try:
        wait_on_progress("the first log's rows", lambda: spark.table(table).count(), lambda n: n >= 50,
                         alive=query_running(q))
        produce(client, later, 70)
        # Nothing changes until a trigger finds the new log: a stall bound of minutes covers that.
        wait_on_progress("the later log's rows", lambda: spark.table(table).count(), lambda n: n >= 120,
                         alive=query_running(q))
    finally:
        q.stop()
    got = {r["log"]: r["count"] for r in spark.table(table).groupBy("log").count().collect()}
    assert got == {first: 50, later: 70}


def test_data_trimmed_between_batches_fails_naming_what_is_gone(spark: SparkSession, client: LedgerClient, uri: str,
                                                                log_name: str, tmp_path: Path) -> None:
    produce(client, log_name, 100)
    df = source(spark, uri, log=log_name)
    for run in ("fail", "skip"):
        copy_available_now(df, uri, f"{log_name}-{run}", tmp_path / run)
    produce(client, log_name, 200, first=100)  # seq 1 and 2, then seq 1 is trimmed unread
    rec = client.describe_log(log_name)
    client.trim_log(log_name, before=Position(rec.ledgers[2].seq, 0, rec.ledgers[2].ledger_id))
    line = failure(start_copy(df, uri, f"{log_name}-fail", tmp_path / "fail"))
    assert line == (
        "[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source perform planPartitions: "
        f"pyspark_ledger.datasource.read.cuts.DataLossError: log '{log_name}': the read starts at seq 1 entry 0 (the "
        "stream's position), but ledgers with seq below 2 were trimmed (data lost: seq 1 entry 0 up to seq 2); the next "
        "data is at seq 2 entry 0. Set failOnDataLoss=false to read what remains")
    copy_available_now(source(spark, uri, log=log_name, failOnDataLoss="false"), uri, f"{log_name}-skip",
                       tmp_path / "skip")
    assert entry_count(client, f"{log_name}-skip") == 200  # seq 0, then seq 2: seq 1 is gone


def test_sink_reports_rows_and_bytes(spark: SparkSession, client: LedgerClient, uri: str, log_name: str,
                                     tmp_path: Path) -> None:
    produce(client, log_name, 500)
    sink = log_name + "-out"
    q = start_query(lambda: source(spark, uri, log=log_name, maxEntriesPerTrigger="200").select("payload")
                    .writeStream.format("ledger").option("metadataServiceUri", uri).option("log", sink)
                    .option("checkpointLocation", str(tmp_path / "s")).option("batching", "false")
                    .trigger(availableNow=True).start())
    await_query(q)
    batches = [p for p in q.recentProgress if p["numInputRows"]]
    assert all(p["sink"]["numOutputRows"] == p["numInputRows"] for p in batches)
    written = client.describe_log(sink)
    got = read_sink_progress(client, sink, q.id)
    assert got is not None
    assert (got.total_rows, got.total_entries, got.total_bytes, got.batches) == (
        500, 500, sum(lg.size_bytes or 0 for lg in written.ledgers), 3)
    assert (got.batch_id, got.rows, got.size_bytes) == (2, 100, 100 * PAYLOAD_BYTES)


def test_a_stream_has_no_end_and_says_so_in_one_line(spark: SparkSession, client: LedgerClient, uri: str,
                                                     log_name: str, tmp_path: Path) -> None:
    produce(client, log_name, 10)
    line = failure(start_copy(source(spark, uri, log=log_name, endingPosition="earliest"), uri, log_name + "-out",
                              tmp_path / "e"))
    assert line == ("[PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source perform "
                    "prepareForTriggerAvailableNow: "
                    'pyspark_ledger.datasource.errors.OptionError: ledger data source option "endingPosition": is for '
                    "batch reads: a stream has no end (Trigger.AvailableNow stops at what is readable when the query "
                    "starts)")


def test_available_now_stops_at_what_was_there_when_it_began(client: LedgerClient, uri: str, log_name: str) -> None:
    produce(client, log_name, 250)
    opts = parse_options({"metadataServiceUri": uri, "log": log_name})
    shape = shape_of(client, opts)
    target = available_now_target(client, opts)
    produce(client, log_name, 100, first=250)  # appended after the query began: not for this run
    at, read, batches = initial_offsets(client, opts, shape.payload_format), 0, 0
    while batches < 20:  # bounded: 250 entries at 60 a batch end in 5
        batch = next_batch(client, opts, shape, at, Limit(max_entries=60), target)
        if batch.end == at:
            break
        read, at, batches = read + sum(batch.taken.values()), batch.end, batches + 1
    assert (read, batches) == (250, 5)
    assert batch.report()[log_name]["lagEntries"] == 100  # the lag is to the log's end, past the run's target


def test_min_partitions_cuts_each_micro_batch(client: LedgerClient, uri: str, log_name: str) -> None:
    produce(client, log_name, 100)
    opts = parse_options({"metadataServiceUri": uri, "log": log_name, "minPartitions": "4"})
    first = client.describe_log(log_name).ledgers[0]
    ranges = plan_batch(client, opts, {log_name: LogOffset(first.seq, 0)}, {log_name: LogOffset(first.seq, 100)})
    assert [(r.first_entry_id, r.last_entry_id) for r in ranges] == [(0, 24), (25, 49), (50, 74), (75, 99)]
