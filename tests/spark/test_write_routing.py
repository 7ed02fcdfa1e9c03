"""Issue 22 item 2 (writing): a `log` column routes rows to logs, a `key` column comes back on
read, save modes, and schema mismatches that name the column and both types. Real bookies, the
session's one SparkSession; every user mistake asserts the first line of the error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from metadata.paths import STAGING_ROUTES, staging_log_path
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.datasource.rows import META_NAMES
from tests.spark.conftest import ledger_opts
from tests.spark.test_batch import eventually

META = list(META_NAMES)
CREATE = "[PYTHON_DATA_SOURCE_ERROR] Failed to initialize Python data source writer: "
SCHEMA_ERROR = "pyspark_ledger.datasource.write.columns.WriteSchemaError: "
ROUTING_ERROR = "pyspark_ledger.datasource.write.columns.RoutingError: "


def writer(df: DataFrame, uri: str, name: str | None, **opts: Any) -> Any:
    base = ledger_opts(uri, name, **opts) if name is not None else \
        {"metadataServiceUri": uri, **{k: str(v) for k, v in opts.items()}}
    return df.write.format("ledger").options(**base)


def read(spark: SparkSession, uri: str, name: str) -> DataFrame:
    return spark.read.format("ledger").options(**ledger_opts(uri, name)).load()


def first_line(action: Callable[[], Any], exc: type[Exception] = AnalysisException) -> str:
    with pytest.raises(exc) as err:
        action()
    text = str(err.value)
    assert "Traceback (most recent call last)" not in text.splitlines()[0]
    return text.splitlines()[0]


def staging_left(client: LedgerClient, names: list[str]) -> list[str]:
    return [f"{n}/{c}" for n in names for c in client.store.children(staging_log_path(n))] + \
        client.store.children(STAGING_ROUTES)




def routed(spark: SparkSession, names: list[str], rows: int) -> DataFrame:
    """rows rows, row i to log names[i % len(names)], with a payload saying which row it is."""
    logs = F.element_at(F.array(*[F.lit(n) for n in names]), (F.col("id") % len(names) + 1).cast("int"))
    return spark.range(rows, numPartitions=2).select(
        F.col("id"), logs.alias("log"), F.col("id").cast("string").cast("binary").alias("payload"))


# ---- routing --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["raw", "arrow"])
def test_the_log_column_routes_each_row_to_its_log(spark: SparkSession, uri: str, log_name: str, client: LedgerClient,
                                                   fmt: str) -> None:
    names = [f"{log_name}-a", f"{log_name}-b", f"{log_name}-c"]
    writer(spark.range(5).select(F.col("id"), F.col("id").cast("string").cast("binary").alias("payload"))
           .drop(*(["id"] if fmt == "raw" else [])), uri, names[0], payloadFormat=fmt).mode("append").save()
    df = routed(spark, names, 3_000)
    stored = df.drop("id") if fmt == "raw" else df
    writer(stored, uri, None, payloadFormat=fmt).mode("append").save()
    for i, name in enumerate(names):
        got = read(spark, uri, name)
        assert "log" in got.columns and got.columns.count("log") == 1  # the column is not stored: only the read's
        want = sorted(str(x).encode() for x in range(i, 3_000, 3)) + (sorted(str(x).encode() for x in range(5)) if i == 0 else [])
        assert sorted(bytes(r.payload) for r in got.select("payload").collect()) == sorted(want)
        assert {r.log for r in got.select("log").distinct().collect()} == {name}
        rec = client.describe_log(name)
        assert rec.payload_format == fmt and (fmt == "raw" or "\"log\"" not in (rec.schema or ""))
    assert staging_left(client, names) == []


@pytest.mark.parametrize("fail_mode", ["raise", "exit"])
def test_a_retried_routed_job_writes_each_log_exactly_once(spark: SparkSession, uri: str, log_name: str,
                                                           client: LedgerClient, fail_mode: str) -> None:
    names = [f"{log_name}-a", f"{log_name}-b"]
    df = routed(spark, names, 20_000)
    writer(df, uri, None, payloadFormat="arrow", arrowBatchRows=500, testFailAttempts=1,
           testFailMode=fail_mode).mode("append").save()
    for i, name in enumerate(names):
        got = read(spark, uri, name)
        assert got.count() == 10_000 and got.select("id").distinct().count() == 10_000
        assert got.filter(F.col("id") % 2 != i).count() == 0
        assert len(client.describe_log(name).ledgers) == 2  # one per partition: the retried attempts'
    eventually(lambda: _assert_no_staging(client, names))


def _assert_no_staging(client: LedgerClient, names: list[str]) -> None:
    assert staging_left(client, names) == []


@pytest.mark.parametrize("fail_mode", ["raise", "exit"])
def test_an_aborted_routed_job_leaves_nothing_visible_in_any_log(spark: SparkSession, uri: str, log_name: str,
                                                                 client: LedgerClient, fail_mode: str) -> None:
    old, new = f"{log_name}-old", f"{log_name}-new"
    writer(spark.range(10).select(F.col("id"), F.lit(b"x").alias("payload")), uri, old,
           payloadFormat="arrow").mode("append").save()
    before = client.describe_log(old)
    ledgers_before = set(client.list_ledgers())
    with pytest.raises(Exception, match="injected failure|exited|crashed|Python worker"):
        writer(routed(spark, [old, new], 4_000), uri, None, payloadFormat="arrow", arrowBatchRows=100,
               testFailAttempts=100, testFailMode=fail_mode).mode("append").save()
    assert client.describe_log(old) == before  # not even taken over: logs are taken at commit
    assert client.logs.get_tail(new) is None
    assert read(spark, uri, old).count() == 10

    def cleaned() -> None:
        _assert_no_staging(client, [old, new])
        assert set(client.list_ledgers()) - ledgers_before == set()

    eventually(cleaned)


def test_a_failure_between_logs_leaves_each_log_committed_or_not_as_a_whole(
        spark: SparkSession, uri: str, log_name: str, client: LedgerClient) -> None:
    a, b = f"{log_name}-a", f"{log_name}-b"  # committed in name order: a, then b
    writer(spark.range(10).select(F.col("id"), F.lit(b"old").alias("payload")), uri, a,
           payloadFormat="arrow").mode("append").save()
    writer(spark.range(10).select(F.col("id"), F.lit(b"old").alias("payload")), uri, b,
           payloadFormat="arrow").mode("append").save()
    w = client.open_log_writer(b, batching=False)  # a producer keeps a ledger of b open: overwrite refuses b at its commit
    try:
        w.append(b"an open ledger")
        b_before = [lg.ledger_id for lg in client.describe_log(b).ledgers]
        with pytest.raises(Exception, match=f"cannot overwrite log '{b}': ledgers .* are still open"):
            writer(routed(spark, [a, b], 1_000).withColumn("payload", F.lit(b"new")), uri, None,
                   payloadFormat="arrow").mode("overwrite").save()
        assert [lg.ledger_id for lg in client.describe_log(b).ledgers] == b_before  # b untouched
    finally:
        w.close()
    got_a = read(spark, uri, a)  # a committed whole
    assert got_a.count() == 500 and {bytes(r.payload) for r in got_a.select("payload").distinct().collect()} == {b"new"}
    eventually(lambda: _assert_no_staging(client, [a, b]))


def test_log_option_and_log_column_together_are_refused(spark: SparkSession, uri: str, log_name: str) -> None:
    line = first_line(lambda: writer(routed(spark, ["x"], 3), uri, log_name, payloadFormat="arrow").mode("append").save())
    assert line == (CREATE + ROUTING_ERROR + f"option log ('{log_name}') and a `log` column both say where rows go: "
                    "drop the column (df.drop(\"log\")) to write every row to that log, or leave out option log to send "
                    "each row to the log its `log` column names")


def test_a_null_log_fails_the_job_naming_the_column(spark: SparkSession, uri: str, log_name: str,
                                                    client: LedgerClient) -> None:
    df = spark.range(4, numPartitions=1).select(
        F.when(F.col("id") == 2, None).otherwise(F.lit(log_name)).alias("log"), F.lit(b"p").alias("payload"))
    with pytest.raises(Exception) as err:
        writer(df, uri, None).mode("append").save()
    assert ROUTING_ERROR + "column `log` is null in a row (row 2 of a batch): every row must name its log" in str(err.value)
    assert client.logs.get_tail(log_name) is None
    eventually(lambda: _assert_no_staging(client, [log_name]))


# ---- keys -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key_type", ["binary", "string"])
def test_raw_keys_come_back_on_read(spark: SparkSession, uri: str, log_name: str, client: LedgerClient,
                                    key_type: str) -> None:
    df = spark.range(5_000, numPartitions=2).select(
        F.when(F.col("id") % 7 == 0, None).otherwise(F.concat(F.lit("k"), (F.col("id") % 100).cast("string")))
        .cast(key_type).alias("key"),
        F.concat(F.lit("v"), F.col("id").cast("string")).cast("binary").alias("payload"))
    writer(df, uri, log_name).mode("append").save()
    writer(df, uri, log_name).mode("append").save()  # appends of the same shape are accepted
    got = read(spark, uri, log_name)
    assert got.columns == ["key", "payload", *META]
    assert got.schema["key"].dataType.typeName() == key_type
    assert got.count() == 10_000
    assert got.select("key", "payload").exceptAll(df.union(df)).count() == 0
    assert client.describe_log(log_name).payload_format == "raw"


def test_arrow_keys_are_a_stored_column(spark: SparkSession, uri: str, log_name: str) -> None:
    df = spark.range(1_000).select(F.col("id").cast("string").alias("key"), F.col("id"))
    writer(df, uri, log_name, payloadFormat="arrow").mode("append").save()
    got = read(spark, uri, log_name)
    assert got.columns == ["key", "id", *META]
    assert got.select("key", "id").exceptAll(df).count() == 0 and got.count() == 1_000


def test_routed_and_keyed_together(spark: SparkSession, uri: str, log_name: str) -> None:
    names = [f"{log_name}-a", f"{log_name}-b"]
    df = routed(spark, names, 1_000).select(F.col("log"), F.col("id").cast("string").alias("key"), F.col("payload"))
    writer(df, uri, None).mode("append").save()
    for i, name in enumerate(names):
        got = read(spark, uri, name).collect()
        assert len(got) == 500 and all(bytes(r.payload) == r.key.encode() and int(r.key) % 2 == i for r in got)


# ---- save modes -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [None, "errorifexists", "error", "ignore"])
def test_modes_other_than_append_and_overwrite_say_which_to_use(spark: SparkSession, uri: str, log_name: str,
                                                                mode: str | None) -> None:
    w = writer(spark.range(3).select(F.lit(b"x").alias("payload")), uri, log_name)
    spark_mode = {"ignore": "Ignore"}.get(mode or "", "ErrorIfExists")
    line = first_line(lambda: (w.mode(mode) if mode else w).save())
    assert line == (f'[UNSUPPORTED_DATA_SOURCE_SAVE_MODE] The data source "ledger" cannot be written in the "{spark_mode}" '
                    'mode. Please use either the "Append" or "Overwrite" mode instead. SQLSTATE: 0A000')


def test_append_and_overwrite_mean_append_and_replace(spark: SparkSession, uri: str, log_name: str) -> None:
    df = spark.range(3).select(F.lit(b"x").alias("payload"))
    writer(df, uri, log_name).mode("append").save()
    writer(df, uri, log_name).mode("append").save()
    assert read(spark, uri, log_name).count() == 6
    writer(df, uri, log_name).mode("overwrite").save()
    assert read(spark, uri, log_name).count() == 3


# ---- schema mismatches -------------------------------------------------------------------------------------


def test_an_arrow_column_of_another_type_names_the_column_and_both_types(spark: SparkSession, uri: str,
                                                                        log_name: str) -> None:
    writer(spark.range(3).select(F.col("id"), F.lit(b"x").alias("value")), uri, log_name,
           payloadFormat="arrow").mode("append").save()
    line = first_line(lambda: writer(spark.range(3).select(F.col("id"), F.lit("x").alias("value")), uri,
                                     log_name).mode("append").save())
    assert line == (CREATE + SCHEMA_ERROR + f"column `value` is string but log '{log_name}' holds binary for it; cast or "
                    "select the columns to match, or use mode overwrite to replace the log")
    line = first_line(lambda: writer(spark.range(3).select(F.col("id")), uri, log_name).mode("append").save())
    assert line == (CREATE + SCHEMA_ERROR + f"column `value` (binary) of log '{log_name}' is missing from the DataFrame; "
                    "cast or select the columns to match, or use mode overwrite to replace the log")


def test_a_raw_payload_that_is_not_binary_names_the_column_and_its_type(spark: SparkSession, uri: str,
                                                                        log_name: str) -> None:
    line = first_line(lambda: writer(spark.range(3).select(F.lit("x").alias("payload")), uri, log_name)
                      .mode("append").save())
    assert line == (CREATE + SCHEMA_ERROR + "column `payload` is string but raw entries are binary: cast it "
                    "(col(\"payload\").cast(\"binary\")), or write with payloadFormat=arrow")


def test_keys_must_match_the_log(spark: SparkSession, uri: str, log_name: str) -> None:
    writer(spark.range(3).select(F.lit(b"x").alias("payload")), uri, log_name).mode("append").save()
    line = first_line(lambda: writer(spark.range(3).select(F.lit(b"k").alias("key"), F.lit(b"x").alias("payload")), uri,
                                     log_name).mode("append").save())
    assert line == (CREATE + SCHEMA_ERROR + f"log '{log_name}' holds entries without keys: drop the `key` column, or use "
                    "mode overwrite to replace the log")
