"""Filter pushdown (pushFilters=true) on a log of 400 tiny ledgers through a real SparkSession:
`seq >= 390` and a 2.5% time range plan at most 3% of the full scan's partitions and entries,
and return exactly the rows of the same query without pushdown. The same for a time range on an
Arrow log and on a batched raw log whose entries carry their own times (every ledger joined in
one commit, so only the ledgers' recorded append times can prune them). Without the option a
reader claims nothing, so reads work in sessions without Spark's pushdown setting too."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql import Column, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSourceReader, GreaterThanOrEqual, LessThanOrEqual
from pyspark.sql.types import BinaryType, LongType, StructField, StructType

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.datasource.source import LedgerCommitMessage, LedgerDataSource, LedgerPartition
from pyspark_ledger.datasource.write.task import write_task
from pyspark_ledger.testing.message_batches import set_message_batches
from tests.spark.conftest import ledger_opts

LEDGERS = 400
ENTRIES_PER_LEDGER = 2


@pytest.fixture(scope="module")
def many(uri: str) -> Iterator[tuple[str, list[int], list[str]]]:
    """A log of LEDGERS ledgers of ENTRIES_PER_LEDGER entries each, each ledger's time (ms) and name."""
    name = "pushdown-400"
    with LedgerClient(uri) as client:
        with client.open_log_writer(name, rollover_entries=ENTRIES_PER_LEDGER, batching=False) as w:
            for i in range(LEDGERS * ENTRIES_PER_LEDGER):
                w.append_async(b"%06d" % i)
                if i % ENTRIES_PER_LEDGER == ENTRIES_PER_LEDGER - 1:
                    w.flush()
        rec = client.describe_log(name)
    assert len(rec.ledgers) == LEDGERS
    yield name, [lg.ctime_ms for lg in rec.ledgers], [lg.ledger_id.qualified_name for lg in rec.ledgers]


def utc(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


def planned(uri: str, name: str, filters: list[Any]) -> tuple[int, int]:
    """(partitions, entries) the reader plans with these filters pushed (what its tasks read)."""
    source = LedgerDataSource(ledger_opts(uri, name, pushFilters="true"))
    reader = source.reader(source.schema())
    left = list(reader.pushFilters(filters))
    assert left == [], left  # every one of them is applied by the reader
    parts = reader.partitions()
    assert all(isinstance(p, LedgerPartition) for p in parts)
    return len(parts), sum(p.range.entries for p in parts if isinstance(p, LedgerPartition))


def unpushed(spark: SparkSession, uri: str, many: tuple[str, list[int], list[str]], where: Column,
             seqs: range) -> list[Row]:
    """The rows of the query without pushdown (Spark filters them), read from the ledgers `seqs`
    only (a full scan of this log is LEDGERS tasks: too slow for the suite); `seqs` must cover
    every ledger the filter keeps, which the callers' filters make sure of."""
    name, _, ledgers = many

    def at(seq: int) -> str:
        return json.dumps({"seq": seq, "ledger": ledgers[seq], "entry": 0})

    opts = ledger_opts(uri, name, startingPosition=at(seqs.start))
    if seqs.stop < LEDGERS:
        opts["endingPosition"] = at(seqs.stop)
    return spark.read.format("ledger").options(**opts).load().where(where).collect()


def test_seq_and_time_ranges_plan_a_small_part_and_return_the_same_rows(spark: SparkSession, uri: str,
                                                                      many: tuple[str, list[int], list[str]]) -> None:
    name, times, _ = many
    full_parts, full_entries = planned(uri, name, [])
    assert full_entries == LEDGERS * ENTRIES_PER_LEDGER
    lo, hi = times[100], times[109]  # 10 of 400 ledgers: 2.5%
    # Ledger times never step back; equal times (the same ms) may reach a few ledgers further.
    near = range(max(0, times.index(lo) - 5), min(LEDGERS, max(i for i, t in enumerate(times) if t == hi) + 6))
    cases: list[tuple[list[Any], Column, range]] = [
        ([GreaterThanOrEqual(("seq",), 390)], F.col("seq") >= 390, range(380, LEDGERS)),
        ([GreaterThanOrEqual(("timestamp",), utc(lo)), LessThanOrEqual(("timestamp",), utc(hi))],
         (F.col("timestamp") >= F.lit(utc(lo))) & (F.col("timestamp") <= F.lit(utc(hi))), near),
    ]
    for filters, where, seqs in cases:
        parts, entries = planned(uri, name, filters)
        print(f"{where}: {parts}/{full_parts} partitions, {entries}/{full_entries} entries")
        assert 0 < parts <= 0.03 * full_parts and 0 < entries <= 0.03 * full_entries
        pushed = spark.read.format("ledger").options(**ledger_opts(uri, name, pushFilters="true")).load().where(where)
        assert pushed.rdd.getNumPartitions() == parts
        got = sorted(pushed.collect())
        assert got == sorted(unpushed(spark, uri, many, where, seqs)) and len(got) == entries  # a row per raw entry


def test_without_the_option_the_reader_claims_nothing(uri: str, many: tuple[str, list[int], list[str]]) -> None:
    source = LedgerDataSource(ledger_opts(uri, many[0]))
    reader = source.reader(source.schema())
    # PySpark tells an overriding reader by its method: ours must be the base class's.
    assert getattr(reader.pushFilters, "__func__", None) is DataSourceReader.pushFilters


def test_entry_filters_cut_ledgers_and_others_stay_with_spark(spark: SparkSession, uri: str,
                                                             many: tuple[str, list[int], list[str]]) -> None:
    name = many[0]
    where = (F.col("entry") >= 1) & (F.col("seq") < 5) & (F.col("index") == 0) & (F.col("payload") != F.lit(b"x"))
    pushed = spark.read.format("ledger").options(**ledger_opts(uri, name, pushFilters="true")).load().where(where)
    got = sorted(pushed.collect())
    assert got == sorted(unpushed(spark, uri, many, where, range(0, 10)))
    assert [(r["seq"], r["entry"]) for r in got] == [(s, 1) for s in range(5)]


# ---- rows with times of their own --------------------------------------------------------------------

TIMED_LEDGERS = 200  # a 2.5% time range: 5 of them
ROWS_PER_BATCH = 2  # each task writes two record batches of this many rows: two entries, two times


def timed_batches(fmt: str, task: int) -> Iterator[Any]:
    """A task's rows: two record batches, a few ms apart, so its two entries get different times."""
    import pyarrow as pa

    for part in range(2):
        ids = [task * 10 + part * ROWS_PER_BATCH + i for i in range(ROWS_PER_BATCH)]
        payloads = pa.array([b"%08d" % i for i in ids], pa.binary())
        if fmt == "arrow":
            yield pa.RecordBatch.from_arrays([pa.array(ids, pa.int64()), payloads], names=["id", "payload"])
        else:
            yield pa.RecordBatch.from_arrays([payloads], names=["payload"])
        time.sleep(0.003)


def millis(t: dt.datetime) -> int:
    """A collected timestamp (naive, in the session's time zone, as Spark gives it) in ms."""
    return round(t.timestamp() * 1000)


def write_timed_log(uri: str, name: str, fmt: str) -> list[tuple[int, int]]:
    """TIMED_LEDGERS ledgers through the write path Spark drives (the driver's writer, each task's
    write_task, one commit), run task by task in this process; each ledger's recorded times."""
    fields = [StructField("payload", BinaryType())]
    if fmt == "arrow":
        fields.insert(0, StructField("id", LongType()))
    source = LedgerDataSource(ledger_opts(uri, name, payloadFormat=fmt, arrowBatchRows=ROWS_PER_BATCH,
                                          batchMaxMessages=ROWS_PER_BATCH))
    writer = source.writer(StructType(fields), False)
    results = [write_task(writer.job, timed_batches(fmt, k), k, 0, k) for k in range(TIMED_LEDGERS)]
    writer.commit([LedgerCommitMessage((r,)) for r in results])
    with LedgerClient(uri) as client:
        rec = client.describe_log(name)
    assert len(rec.ledgers) == TIMED_LEDGERS and len({lg.ctime_ms for lg in rec.ledgers}) == 1  # one commit
    assert all(lg.entry_count == 2 and lg.append_times_ms is not None for lg in rec.ledgers)
    return [lg.append_times_ms for lg in rec.ledgers if lg.append_times_ms is not None]


@pytest.fixture(scope="module")
def timed_logs(uri: str) -> dict[str, list[tuple[int, int]]]:
    """An Arrow log and a batched raw log, each TIMED_LEDGERS ledgers of two entries: name -> times."""
    with LedgerClient(uri) as client:
        set_message_batches(client, True)
        try:
            return {name: write_timed_log(uri, name, fmt)
                    for name, fmt in (("timed-arrow-200", "arrow"), ("timed-batched-200", "raw"))}
        finally:
            set_message_batches(client, False)


@pytest.mark.parametrize("name", ["timed-arrow-200", "timed-batched-200"])
def test_a_time_range_prunes_ledgers_by_their_own_times_and_filters_their_rows(
        spark: SparkSession, uri: str, timed_logs: dict[str, list[tuple[int, int]]], name: str) -> None:
    bounds = timed_logs[name]
    # From ledger 100's second entry to ledger 104's first: 5 ledgers (2.5%), cut inside two of them.
    lo, hi = bounds[100][1], bounds[104][0]
    overlapping = [s for s, (a, b) in enumerate(bounds) if a <= hi and b >= lo]
    assert overlapping[0] >= 99 and overlapping[-1] <= 105  # tasks ran one after another
    full_parts, full_entries = planned(uri, name, [])
    parts, entries = planned(uri, name, [GreaterThanOrEqual(("timestamp",), utc(lo)),
                                         LessThanOrEqual(("timestamp",), utc(hi))])
    print(f"{name}: {parts}/{full_parts} partitions, {entries}/{full_entries} entries")
    assert (parts, entries) == (len(overlapping), 2 * len(overlapping))  # exactly the ledgers the range meets
    assert parts <= 0.03 * full_parts and entries <= 0.03 * full_entries
    where = (F.col("timestamp") >= F.lit(utc(lo))) & (F.col("timestamp") <= F.lit(utc(hi)))
    pushed = spark.read.format("ledger").options(**ledger_opts(uri, name, pushFilters="true")).load().where(where)
    assert pushed.rdd.getNumPartitions() == parts
    got = sorted(pushed.collect())
    start = {"seq": overlapping[0] - 1, "ledger": "", "entry": 0}
    with LedgerClient(uri) as client:
        ids = [lg.ledger_id.qualified_name for lg in client.describe_log(name).ledgers]
    start["ledger"] = ids[overlapping[0] - 1]
    end = {"seq": overlapping[-1] + 2, "ledger": ids[overlapping[-1] + 2], "entry": 0}
    unpushed_rows = (spark.read.format("ledger")
                     .options(**ledger_opts(uri, name, startingPosition=json.dumps(start), endingPosition=json.dumps(end)))
                     .load().where(where).collect())
    assert got == sorted(unpushed_rows) and got  # the reader filtered each row as Spark would have
    assert all(lo <= millis(r["timestamp"]) <= hi for r in got)
    # Only the rows at their own times pass: the first entry of ledger 100 is left out if it is older.
    if bounds[100][0] < lo:
        assert len(got) < ROWS_PER_BATCH * 2 * len(overlapping)
    # metadataColumns without timestamp: Spark cannot name the column, so nothing is pushed on it.
    none = spark.read.format("ledger").options(**ledger_opts(uri, name, pushFilters="true", metadataColumns="seq"))
    assert none.load().where(F.col("seq") == 100).count() == 2 * ROWS_PER_BATCH


def test_a_batching_log_writer_records_each_ledgers_append_times(spark: SparkSession, uri: str) -> None:
    """The LogWriter's seals (rollover and close) record the times its batches carry; the rows'
    timestamps, read back, lie within them and reach both ends."""
    name = "timed-log-writer"
    with LedgerClient(uri) as client:
        set_message_batches(client, True)
        try:
            with client.open_log_writer(name, rollover_entries=2) as w:
                for i in range(6):
                    w.append(b"m%d" % i)
                    time.sleep(0.002)
        finally:
            set_message_batches(client, False)
        rec = client.describe_log(name)
    assert [lg.entry_count for lg in rec.ledgers] == [2, 2, 2]
    rows = spark.read.format("ledger").options(**ledger_opts(uri, name)).load().collect()
    for lg in rec.ledgers:
        stamps = [millis(r["timestamp"]) for r in rows if r["seq"] == lg.seq]
        assert lg.append_times_ms == (min(stamps), max(stamps)), (lg, stamps)
