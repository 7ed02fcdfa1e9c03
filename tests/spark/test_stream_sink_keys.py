"""The streaming sink follows a batch append's column rules (pyspark_ledger/datasource/write/columns.py): a `key` column is
kept per row in a raw log, and a stream that does not match the log's recorded layout is refused
with a first line naming the difference, instead of committing entries that read back wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.progress import await_query
from pyspark_ledger.testing.stream_start import start_query
from tests.spark.conftest import ledger_opts
from tests.spark.test_streaming import produce, stream


def _append_keyed(spark: SparkSession, uri: str, name: str, rows: int) -> None:
    df = spark.range(rows).select(F.concat(F.lit("batch-"), F.col("id").cast("string")).cast("binary").alias("key"),
                                  F.lit(b"from a batch").alias("payload"))
    df.write.format("ledger").options(**ledger_opts(uri, name)).mode("append").save()


def test_a_stream_keeps_its_key_column_in_a_raw_log(spark: SparkSession, uri: str, log_name: str,
                                                    client: LedgerClient, tmp_path: Path) -> None:
    sink = log_name + "-keyed"
    _append_keyed(spark, uri, sink, 10)
    payloads = produce(client, log_name, 300, rollover=120)
    keyed = stream(spark, uri, log_name, maxEntriesPerTrigger="100").select(
        F.concat(F.lit("entry-"), F.col("seq").cast("string"), F.lit("-"), F.col("entry").cast("string"))
        .cast("binary").alias("key"), F.col("payload"))
    query = start_query(lambda: keyed.writeStream.format("ledger").options(**ledger_opts(uri, sink))
                        .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    await_query(query)  # the stream finishes
    got = spark.read.format("ledger").options(**ledger_opts(uri, sink)).load().collect()
    assert [bytes(r.key) for r in got[:10]] == [b"batch-%d" % i for i in range(10)]
    streamed = got[10:]
    assert [bytes(r.payload) for r in streamed] == payloads  # exactly once, in order
    assert all(bytes(r.key).startswith(b"entry-") for r in streamed) and len({bytes(r.key) for r in streamed}) == 300


def test_a_stream_without_keys_is_refused_by_a_keyed_log(spark: SparkSession, uri: str, log_name: str,
                                                          client: LedgerClient, tmp_path: Path) -> None:
    sink = log_name + "-keyed"
    _append_keyed(spark, uri, sink, 3)
    produce(client, log_name, 10)
    query = (stream(spark, uri, log_name).select("payload").writeStream.format("ledger")
             .options(**ledger_opts(uri, sink)).option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True))
    with pytest.raises(Exception) as err:  # Spark's error class differs by where it surfaces
        await_query(start_query(query.start))
    first = str(err.value).splitlines()[0]  # [STREAM_FAILED] ... [PYTHON_DATA_SOURCE_ERROR] ...: the reason
    assert (f"WriteSchemaError: log {sink!r} holds keyed entries (key, payload): add a binary `key` column, or write "
            "the stream to another log (a stream cannot overwrite one)") in first, first  # not "mode overwrite"
    assert spark.read.format("ledger").options(**ledger_opts(uri, sink)).load().count() == 3  # nothing appended
