"""Issue 22, reading: every new option round-trips through Spark against the session's real
three-bookie cluster, and a row's columns turn back into a position that resumes exactly after it."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.datasource.rows import META_NAMES
from pyspark_ledger.log import Position

META = list(META_NAMES)


def load(spark: SparkSession, uri: str, **opts: Any) -> DataFrame:
    return spark.read.format("ledger").option("metadataServiceUri", uri).options(**{k: str(v) for k, v in opts.items()}).load()


def append(spark: SparkSession, uri: str, name: str, first: int, n: int, fmt: str = "raw") -> None:
    ids = spark.range(first, first + n, numPartitions=2)
    df = ids.select(F.col("id").cast("string").cast("binary").alias("payload")) if fmt == "raw" else \
        ids.select(F.col("id"), F.concat(F.lit("v"), F.col("id").cast("string")).alias("v"))
    df.write.format("ledger").option("metadataServiceUri", uri).option("log", name).option("payloadFormat", fmt) \
        .option("arrowBatchRows", 100).option("batching", "false").mode("append").save()  # one row = one entry


def ids_of(df: DataFrame) -> list[int]:
    if "payload" in df.columns:
        return sorted(int(bytes(r.payload)) for r in df.select("payload").collect())
    return sorted(r.id for r in df.select("id").collect())


def position_after(row: Row) -> dict[str, Any]:
    """The position just after a row, from its own columns: the next row of its entry (row["index"]:
    Row is a tuple, whose .index is a method)."""
    return {"seq": row.seq, "ledger": row.ledger, "entry": row.entry, "index": row["index"] + 1}


def names(prefix: str, n: int) -> list[str]:
    return [f"{prefix}-{i}" for i in range(n)]


@pytest.fixture
def prefix() -> str:
    return f"m{uuid.uuid4().hex[:8]}"


def test_logs_read_several_logs_and_every_row_says_where_it_is(spark: SparkSession, uri: str, prefix: str,
                                                              client: LedgerClient) -> None:
    a, b = names(prefix, 2)
    append(spark, uri, a, 0, 300)
    append(spark, uri, b, 1000, 200)
    got = load(spark, uri, logs=f"{a},{b}")
    assert got.columns == ["payload", *META]
    assert [f.dataType.simpleString() for f in got.schema.fields[1:]] == \
        ["string", "bigint", "string", "bigint", "int", "timestamp"]
    assert ids_of(got) == list(range(300)) + list(range(1000, 1200))
    rows = got.collect()
    assert {r.log for r in rows} == {a, b} and all((int(bytes(r.payload)) >= 1000) == (r.log == b) for r in rows)
    assert all(r["index"] == 0 for r in rows)  # raw entries: one row each
    # seq, ledger, entry and timestamp are the log's own: each (seq, ledger) pair is in the log record.
    for name in (a, b):
        rec = client.describe_log(name)
        listed = {(lg.seq, lg.ledger_id.qualified_name): lg.ctime_ms for lg in rec.ledgers}
        mine = [r for r in rows if r.log == name]
        assert {(r.seq, r.ledger) for r in mine} == set(listed)
        assert all(int(r.timestamp.timestamp() * 1000) == listed[(r.seq, r.ledger)] for r in mine)
        per_ledger: dict[str, list[int]] = {}
        for r in mine:
            per_ledger.setdefault(r.ledger, []).append(r.entry)
        assert all(sorted(v) == list(range(len(v))) for v in per_ledger.values())


def test_log_pattern_reads_every_log_whose_whole_name_matches(spark: SparkSession, uri: str, prefix: str) -> None:
    a, b = names(prefix, 2)
    other = f"x{prefix}-0"  # contains the pattern's text but does not match the whole name
    append(spark, uri, a, 0, 50, "arrow")
    append(spark, uri, b, 50, 50, "arrow")
    append(spark, uri, other, 500, 10, "arrow")
    got = load(spark, uri, logPattern=f"{prefix}-[0-9]+")
    assert got.columns == ["id", "v", *META]
    assert ids_of(got) == list(range(100))
    assert {r.log for r in got.select("log").distinct().collect()} == {a, b}


def test_positions_per_log_start_inclusive_and_end_exclusive(spark: SparkSession, uri: str, prefix: str,
                                                           client: LedgerClient) -> None:
    a, b = names(prefix, 2)
    with client.open_log_writer(a, rollover_entries=40, batching=False) as w:
        pos = [w.append(str(i).encode()) for i in range(100)]
    with client.open_log_writer(b, batching=False) as w:
        for i in range(1000, 1010):
            w.append(str(i).encode())
    starting = {a: pos[30].to_json(), b: "latest"}
    ending = {a: pos[85].to_json()}
    got = load(spark, uri, logs=f"{a},{b}", startingPositions=json.dumps(starting), endingPositions=json.dumps(ending))
    assert ids_of(got) == list(range(30, 85))  # b from latest: nothing; a from 30 up to (not incl.) 85
    both = load(spark, uri, logs=f"{a},{b}", endingPositions=json.dumps(ending), startingPosition="earliest")
    assert ids_of(both) == list(range(85)) + list(range(1000, 1010))


def test_timestamps_select_whole_ledgers_by_the_time_they_joined_the_log(spark: SparkSession, uri: str,
                                                                         log_name: str) -> None:
    for batch in range(3):  # each append job commits its own ledgers, stamped at its commit
        append(spark, uri, log_name, 100 * batch, 100)
        time.sleep(0.05)
    rows = load(spark, uri, log=log_name).select("payload", "timestamp").collect()
    stamp = {int(bytes(r.payload)) // 100: int(r.timestamp.timestamp() * 1000) for r in rows}
    assert stamp[0] < stamp[1] < stamp[2]
    assert ids_of(load(spark, uri, log=log_name, startingTimestamp=stamp[1])) == list(range(100, 300))
    assert ids_of(load(spark, uri, log=log_name, startingTimestamp=stamp[1] + 1)) == list(range(200, 300))
    assert ids_of(load(spark, uri, log=log_name, endingTimestamp=stamp[2])) == list(range(200))
    assert ids_of(load(spark, uri, log=log_name, startingTimestamp=stamp[1], endingTimestamp=stamp[2])) == \
        list(range(100, 200))
    assert load(spark, uri, log=log_name, startingTimestamp=stamp[2] + 60_000).count() == 0


def test_min_partitions_cuts_a_small_plan(spark: SparkSession, uri: str, log_name: str, client: LedgerClient) -> None:
    with client.open_log_writer(log_name, batching=False) as w:
        for f in [w.append_async(str(i).encode()) for i in range(1000)]:
            f.result(60)
    assert load(spark, uri, log=log_name).rdd.getNumPartitions() == 1  # one ledger, one fragment
    got = load(spark, uri, log=log_name, minPartitions=7)
    assert got.rdd.getNumPartitions() >= 7
    assert ids_of(got) == list(range(1000))


def test_fail_on_data_loss(spark: SparkSession, uri: str, log_name: str, client: LedgerClient) -> None:
    with client.open_log_writer(log_name, rollover_entries=10, batching=False) as w:
        pos = [w.append(str(i).encode()) for i in range(30)]
    client.trim_log(log_name, before=pos[10])  # the first ledger (entries 0..9) is gone
    start = json.dumps(pos[5].to_json())
    with pytest.raises(Exception) as err:
        load(spark, uri, log=log_name, startingPosition=start).collect()
    first = str(err.value).splitlines()[0]
    assert first == (
        "[PYTHON_DATA_SOURCE_ERROR] Failed to generate Python data source read partitions: "
        f"pyspark_ledger.datasource.read.cuts.DataLossError: log '{log_name}': the read starts at seq 0 entry 5 "
        "(startingPosition), but ledgers with seq below 1 were trimmed (data lost: seq 0 entry 5 up to seq 1); "
        "the next data is at seq 1 entry 0. Set failOnDataLoss=false to read what remains")
    skipped = load(spark, uri, log=log_name, startingPosition=start, failOnDataLoss="false")
    assert ids_of(skipped) == list(range(10, 30))
    assert ids_of(load(spark, uri, log=log_name)) == list(range(10, 30))  # earliest: what remains, no loss


@pytest.mark.parametrize("fmt", ["raw", "arrow"])
def test_a_rows_columns_resume_exactly_after_it(spark: SparkSession, uri: str, log_name: str, fmt: str) -> None:
    append(spark, uri, log_name, 0, 1000, fmt)  # arrow: entries of up to 100 rows
    append(spark, uri, log_name, 1000, 500, fmt)
    rows = load(spark, uri, log=log_name).orderBy("seq", "entry", "index").collect()
    assert len(rows) == 1500
    for at in (0, 1, 457, 999, 1000, 1498, 1499):  # inside entries, at their ends, across ledgers
        row = rows[at]
        after = json.dumps({log_name: position_after(row)})
        rest = load(spark, uri, log=log_name, startingPositions=after).orderBy("seq", "entry", "index").collect()
        assert rest == rows[at + 1:], (fmt, at)
        # The same position ends a read just after the row (exclusive end).
        upto = load(spark, uri, log=log_name, endingPositions=after).orderBy("seq", "entry", "index").collect()
        assert upto == rows[: at + 1], (fmt, at)
    if fmt == "arrow":
        assert max(r["index"] for r in rows) == 99 and len({(r.seq, r.entry) for r in rows}) >= 15


def test_a_position_built_from_a_row_is_a_log_position(spark: SparkSession, uri: str, log_name: str,
                                                      client: LedgerClient) -> None:
    with client.open_log_writer(log_name, batching=False) as w:
        written = [w.append(str(i).encode()) for i in range(5)]
    row = load(spark, uri, log=log_name).orderBy("entry").collect()[3]
    assert Position.from_json({k: v for k, v in position_after(row).items() if k != "index"}) == written[3]
    # With its index (the message after the row's, Position.index): after entry 3, before entry 4.
    after = Position.from_json(position_after(row))
    assert (after.seq, after.entry_id, after.ledger_id, after.index) == (written[3].seq, 3, written[3].ledger_id, 1)
    assert written[3] < after < written[4]
