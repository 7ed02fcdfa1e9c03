"""Option metadataColumns and user-given schemas through a real SparkSession: the read's
columns are the ones chosen, batch and streaming, and a row that keeps log, seq, ledger,
entry and index resumes exactly after itself as a starting position."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.stream_start import start_query
from tests.spark.conftest import ledger_opts


def write_arrow(spark: SparkSession, uri: str, name: str, rows: int) -> None:
    df = spark.range(rows, numPartitions=2).select(F.col("id"), F.concat(F.lit("p"), F.col("id").cast("string")).alias("text"))
    df.write.format("ledger").options(**ledger_opts(uri, name, payloadFormat="arrow", arrowBatchRows=7)).mode("append").save()


def read(spark: SparkSession, uri: str, name: str, **opts: object) -> DataFrame:
    return spark.read.format("ledger").options(**ledger_opts(uri, name, **opts)).load()


def test_metadata_columns_choose_the_schema_batch_and_stream(spark: SparkSession, uri: str, log_name: str,
                                                           tmp_path: Path) -> None:
    write_arrow(spark, uri, log_name, 50)
    assert read(spark, uri, log_name).columns == ["id", "text", "log", "seq", "ledger", "entry", "index", "timestamp"]
    assert read(spark, uri, log_name, metadataColumns="none").columns == ["id", "text"]
    few = read(spark, uri, log_name, metadataColumns="index,entry")
    assert few.columns == ["id", "text", "entry", "index"]
    full = read(spark, uri, log_name)
    assert sorted(few.collect()) == sorted(full.select("id", "text", "entry", "index").collect())
    stream = start_query(lambda: spark.readStream.format("ledger")
                         .options(**ledger_opts(uri, log_name, metadataColumns="seq"))
                         .load().writeStream.format("memory").queryName(f"mc_{log_name.replace('-', '_')}")
                         .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    try:
        stream.awaitTermination(600)
    finally:
        stream.stop()
    got = spark.table(f"mc_{log_name.replace('-', '_')}")
    assert got.columns == ["id", "text", "seq"] and got.count() == 50


def test_a_user_schema_is_honoured_and_a_wrong_one_says_why(spark: SparkSession, uri: str, log_name: str) -> None:
    write_arrow(spark, uri, log_name, 20)
    df = (spark.read.format("ledger").schema("id bigint, text string, seq bigint, entry bigint")
          .options(**ledger_opts(uri, log_name)).load())
    assert df.columns == ["id", "text", "seq", "entry"] and df.count() == 20
    with pytest.raises(Exception, match="must start with the log's data columns"):
        (spark.read.format("ledger").schema("id bigint, seq bigint").options(**ledger_opts(uri, log_name)).load()
         .collect())


def test_a_row_resumes_after_itself(spark: SparkSession, uri: str, log_name: str) -> None:
    write_arrow(spark, uri, log_name, 60)
    rows = read(spark, uri, log_name, metadataColumns="log,seq,ledger,entry,index").orderBy("seq", "entry", "index").collect()
    pick = rows[23]  # inside an Arrow entry of 7 rows
    start = {pick["log"]: {"seq": pick["seq"], "ledger": pick["ledger"], "entry": pick["entry"],
                           "index": pick["index"] + 1}}
    after = read(spark, uri, log_name, metadataColumns="none", startingPositions=json.dumps(start))
    assert sorted(r["id"] for r in after.collect()) == sorted(r["id"] for r in rows[24:])


def test_the_option_is_checked(spark: SparkSession, uri: str, log_name: str, client: LedgerClient) -> None:
    write_arrow(spark, uri, log_name, 3)
    with pytest.raises(Exception, match='"metadataColumns": unknown column \'offset\''):
        read(spark, uri, log_name, metadataColumns="offset,seq").collect()
