"""Batched raw rows (entry format 3) through a real SparkSession: raw writes pack rows into
message batches (bounded by batchMaxMessages / batchMaxBytes) once the cluster setting
message_batches is on, batching=false keeps one row per entry, reads unpack them with each
row's index, and a row resumes exactly after itself, batch and stream, inside a batched entry."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.message_batches import set_message_batches
from pyspark_ledger.testing.stream_start import start_query
from tests.spark.conftest import ledger_opts

ROWS = 500


@pytest.fixture
def batches_on(client: LedgerClient) -> Iterator[None]:
    set_message_batches(client, True)
    try:
        yield
    finally:
        set_message_batches(client, False)


def payloads(spark: SparkSession, rows: int = ROWS) -> DataFrame:
    return spark.range(rows, numPartitions=2).select(F.format_string("row-%05d", F.col("id")).cast("binary").alias("payload"))


def write(df: DataFrame, uri: str, name: str, **opts: object) -> None:
    df.write.format("ledger").options(**ledger_opts(uri, name, **opts)).mode("append").save()


def read(spark: SparkSession, uri: str, name: str, **opts: object) -> DataFrame:
    return spark.read.format("ledger").options(**ledger_opts(uri, name, **opts)).load()


def expected(rows: int = ROWS) -> list[bytes]:
    return sorted(b"row-%05d" % i for i in range(rows))


@pytest.mark.usefixtures("batches_on")
def test_raw_rows_are_batched_and_read_back_with_their_index(spark: SparkSession, uri: str, log_name: str,
                                                            client: LedgerClient) -> None:
    write(payloads(spark), uri, log_name, batchMaxMessages=7)
    rec = client.describe_log(log_name)
    assert rec.message_format == "batched"
    entries = sum(lg.entry_count for lg in rec.ledgers)
    assert ROWS / 7 <= entries <= ROWS / 7 + 2  # two tasks, each with a last, partial batch
    df = read(spark, uri, log_name)
    rows = df.collect()
    assert sorted(r["payload"] for r in rows) == expected()
    assert {r["index"] for r in rows} == set(range(7))
    assert len({(r["seq"], r["entry"], r["index"]) for r in rows}) == ROWS
    only = read(spark, uri, log_name, metadataColumns="none")
    assert only.columns == ["payload"] and sorted(r["payload"] for r in only.collect()) == expected()


@pytest.mark.usefixtures("batches_on")
def test_keys_travel_in_the_batch_key_column(spark: SparkSession, uri: str, log_name: str) -> None:
    text = F.col("payload").cast("string")
    keyed = payloads(spark, 60).withColumn(
        "key", F.when(text.endswith("7"), F.lit(None)).when(text.endswith("0"), F.lit("k")).otherwise(F.substring(text, 5, 5)))
    write(keyed, uri, log_name, batchMaxMessages=8)
    got = sorted((r["payload"], r["key"]) for r in read(spark, uri, log_name, metadataColumns="none").collect())
    assert got == sorted((r["payload"], r["key"]) for r in keyed.collect())  # payloads are unique
    assert any(k is None for _, k in got) and any(k == "k" for _, k in got)
    assert read(spark, uri, log_name).schema["key"].dataType.simpleString() == "string"


@pytest.mark.usefixtures("batches_on")
def test_batching_false_and_the_byte_bound(spark: SparkSession, uri: str, log_name: str, client: LedgerClient) -> None:
    write(payloads(spark, 40), uri, log_name, batching="false")
    rec = client.describe_log(log_name)
    assert rec.message_format == "single" and sum(lg.entry_count for lg in rec.ledgers) == 40
    other = log_name + "-b"
    write(payloads(spark, 40), uri, other, batchMaxBytes=8 + 3 * (12 + 9))  # 3 rows of 9 bytes a batch
    assert sum(lg.entry_count for lg in client.describe_log(other).ledgers) == 14  # 20 rows a task: 7 batches
    assert sorted(r["payload"] for r in read(spark, uri, other).collect()) == expected(40)


@pytest.mark.usefixtures("batches_on")
def test_a_row_resumes_after_itself_inside_a_batch_batch_and_stream(spark: SparkSession, uri: str, log_name: str,
                                                                     tmp_path: Path) -> None:
    write(payloads(spark), uri, log_name, batchMaxMessages=10)
    keep = "log,seq,ledger,entry,index"
    rows = read(spark, uri, log_name, metadataColumns=keep).orderBy("seq", "entry", "index").collect()
    for at in (0, 133, ROWS - 2):
        pick = rows[at]
        assert at == 0 or pick["index"] or rows[at + 1]["index"]  # inside a batched entry
        start = json.dumps({pick["log"]: {"seq": pick["seq"], "ledger": pick["ledger"], "entry": pick["entry"],
                                          "index": pick["index"] + 1}})
        after = read(spark, uri, log_name, startingPositions=start).collect()
        assert sorted(r["payload"] for r in after) == sorted(r["payload"] for r in rows[at + 1:])
        table = f"resume_{at}_{log_name.replace('-', '_')}"
        query = start_query(lambda: spark.readStream.format("ledger").options(
            **ledger_opts(uri, log_name, startingPositions=start, maxEntriesPerTrigger=3))
            .load().writeStream.format("memory").queryName(table)
            .option("checkpointLocation", str(tmp_path / table)).trigger(availableNow=True).start())
        try:
            query.awaitTermination(600)
        finally:
            query.stop()
        streamed = spark.table(table).collect()
        assert sorted(r["payload"] for r in streamed) == sorted(r["payload"] for r in rows[at + 1:])
