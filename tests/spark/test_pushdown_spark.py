"""Filter pushdown (pushFilters=true) on a log of 400 tiny ledgers through a real SparkSession:
`seq >= 390` and a 2.5% time range plan at most 3% of the full scan's partitions and entries,
and return exactly the rows of the same query without pushdown. Without the option a reader
claims nothing, so reads work in sessions without Spark's pushdown setting too."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql import Column, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSourceReader, GreaterThanOrEqual, LessThanOrEqual

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.datasource.source import LedgerDataSource, LedgerPartition
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
