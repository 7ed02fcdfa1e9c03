"""spark.read.format("ledger") and df.write.format("ledger") on real bookies.

Every test uses the session's one SparkSession (local[2,4]) and one three-bookie cluster, and
its own log. Content is compared exactly with exceptAll in both directions plus counts.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import replace
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from metadata import CloseReason, LedgerId, LedgerState, NoSuchLedgerError
from metadata.paths import staging_log_path
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.datasource.rows import META_NAMES
from pyspark_ledger.testing.progress import STALL_S, wait_on_progress
from tests.spark.conftest import ledger_opts

ROWS_BIG = 1_000_000
META = list(META_NAMES)  # the columns every row read carries (log, seq, ledger, entry, index, timestamp)


def write(df: DataFrame, uri: str, name: str, mode: str = "append", **opts: Any) -> None:
    df.write.format("ledger").options(**ledger_opts(uri, name, **opts)).mode(mode).save()


def read(spark: SparkSession, uri: str, name: str, **opts: Any) -> DataFrame:
    return spark.read.format("ledger").options(**ledger_opts(uri, name, **opts)).load()


def assert_same_rows(a: DataFrame, b: DataFrame) -> None:
    assert a.count() == b.count()
    assert a.exceptAll(b).count() == 0
    assert b.exceptAll(a).count() == 0


def all_ledgers(client: LedgerClient) -> set[LedgerId]:
    return set(client.list_ledgers())


def assert_gone_or_marked(client: LedgerClient, ledgers: set[LedgerId]) -> None:
    """Ledgers of failed attempts: deleted, or closed with a BP-44 context marking them for deletion."""
    for lid in ledgers:
        try:
            meta = client.ledger_metadata(lid)
        except NoSuchLedgerError:
            continue
        ctx = meta.close_context
        assert meta.state is LedgerState.CLOSED and ctx is not None and ctx.reason is CloseReason.ABNORMAL, meta
        assert ctx.expect_delete_after_ms is not None and ctx.expect_delete_after_ms <= int(time.time() * 1000)


def staging_of(client: LedgerClient, name: str) -> list[str]:
    return client.store.children(staging_log_path(name))


def eventually(check: Any, stall_s: float = STALL_S) -> None:
    """Spark returns from a failed job while its cancelled tasks may still be running; they
    clean up after themselves within seconds (minutes on a loaded machine). Retry `check` until
    it passes; give up when what it reports stops changing for `stall_s`."""
    def failure() -> str | None:
        try:
            check()
        except AssertionError as exc:
            return str(exc)
        return None

    wait_on_progress("cleanup after the failed job", failure, lambda why: why is None, stall_s=stall_s)


# ---- round trips ----------------------------------------------------------------------------------------


def test_raw_round_trip_of_a_million_entries(spark: SparkSession, uri: str, log_name: str, client: LedgerClient) -> None:
    df = spark.range(ROWS_BIG).select(
        F.expr("cast(concat('entry-', cast(id as string), repeat('.', 80)) as binary)").alias("payload"))
    write(df, uri, log_name, batching="false")  # one row = one entry: this round trip is of entries
    got = read(spark, uri, log_name, maxEntriesPerPartition=300_000)
    assert got.columns == ["payload", *META]
    assert_same_rows(got.select("payload"), df)
    # Every ledger is read whole and in order: entry ids 0..n-1 per ledger.
    per_ledger = got.groupBy("ledger").agg(
        F.min("entry").alias("lo"), F.max("entry").alias("hi"), F.count("*").alias("n")).collect()
    assert all(r.lo == 0 and r.hi == r.n - 1 for r in per_ledger)
    rec = client.describe_log(log_name)
    assert rec.payload_format == "raw" and sum(lg.entry_count or 0 for lg in rec.ledgers) == ROWS_BIG
    # The log lists the ledgers in partition order (not id order: tasks race to allocate ids), so
    # the first row of each ledger in log order ascends through the source range.
    first_row = {r.ledger: r.first for r in got.groupBy("ledger").agg(
        F.min(F.expr("cast(regexp_extract(cast(payload as string), 'entry-([0-9]+)', 1) as bigint)")).alias("first")).collect()}
    order = [lg.ledger_id.qualified_name for lg in rec.ledgers]
    assert sorted(order) == sorted(first_row) and [first_row[i] for i in order] == sorted(first_row.values())
    assert staging_of(client, log_name) == []


def test_arrow_round_trip_of_a_million_rows(spark: SparkSession, uri: str, log_name: str, client: LedgerClient) -> None:
    df = spark.range(ROWS_BIG).select(
        F.col("id"),
        F.concat(F.lit("name-"), F.col("id").cast("string")).alias("name"),
        (F.col("id") / 7).alias("ratio"),
        F.when(F.col("id") % 11 == 0, None).otherwise(F.col("id") % 1000).cast("int").alias("maybe"),
        F.timestamp_seconds(F.col("id")).alias("ts"),
        F.array(F.col("id").cast("string"), F.lit("x")).alias("tags"),
        F.col("id").cast("decimal(20,2)").alias("amount"),
    )
    write(df, uri, log_name, payloadFormat="arrow", arrowBatchRows=20_000)
    got = read(spark, uri, log_name)
    assert got.columns == df.columns + META
    # Same types; the log's schema makes everything nullable (appends may differ in nullability).
    assert [f.dataType.simpleString() for f in got.schema.fields[: len(df.columns)]] == \
        [f.dataType.simpleString() for f in df.schema.fields]
    assert_same_rows(got.drop(*META), df)
    rec = client.describe_log(log_name)
    assert rec.payload_format == "arrow" and rec.schema is not None and json.loads(rec.schema)["type"] == "struct"
    # An entry holds at most arrowBatchRows rows.
    assert got.groupBy("ledger", "entry").count().agg(F.max("count")).first()[0] <= 20_000


def test_overwrite_replaces_the_log_atomically_and_deletes_old_ledgers(spark: SparkSession, uri: str, log_name: str,
                                                                       client: LedgerClient) -> None:
    first = spark.range(1000).select(F.col("id"), F.lit("old").alias("v"))
    second = spark.range(500).select(F.col("id"), F.lit("new").alias("v"))
    write(first, uri, log_name, payloadFormat="arrow")
    write(first, uri, log_name)  # the log's recorded format (arrow) is the default for appends
    old = [lg.ledger_id for lg in client.describe_log(log_name).ledgers]
    second.write.format("ledger").option("metadataServiceUri", uri).mode("overwrite").save(log_name)  # path = log
    assert_same_rows(read(spark, uri, log_name).drop(*META), second)
    rec = client.describe_log(log_name)
    assert not set(old) & {lg.ledger_id for lg in rec.ledgers} and rec.pending_deletions == ()
    for lid in old:
        with pytest.raises(NoSuchLedgerError):
            client.ledger_metadata(lid)


def test_append_refuses_another_schema(spark: SparkSession, uri: str, log_name: str) -> None:
    write(spark.range(10), uri, log_name, payloadFormat="arrow")
    with pytest.raises(Exception, match=f"column `id` is string but log '{log_name}' holds bigint for it"):
        write(spark.range(10).select(F.col("id").cast("string").alias("id")), uri, log_name)
    with pytest.raises(Exception, match="payloadFormat"):
        write(spark.range(10).select(F.col("id").cast("string").cast("binary").alias("payload")), uri, log_name,
              payloadFormat="raw")


# ---- failures ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fail_mode", ["raise", "exit"])
def test_a_task_that_fails_once_is_retried_without_duplicates_or_loss(
    spark: SparkSession, uri: str, log_name: str, client: LedgerClient, fail_mode: str
) -> None:
    """Every partition's first attempt writes and acknowledges some entries, then fails (raise:
    an exception, cleaned by the task itself; exit: the Python worker dies, cleaned by commit()
    from the staging nodes). The retried attempts' output is committed, exactly once."""
    before = all_ledgers(client)
    df = spark.range(0, 60_000, numPartitions=2).select(F.col("id"), (F.col("id") * 3).alias("x"))
    write(df, uri, log_name, payloadFormat="arrow", arrowBatchRows=1000, testFailAttempts=1, testFailMode=fail_mode)
    got = read(spark, uri, log_name)
    assert got.select("id").distinct().count() == 60_000
    assert_same_rows(got.drop(*META), df)
    committed = {lg.ledger_id for lg in client.describe_log(log_name).ledgers}
    assert len(committed) == 2
    assert_gone_or_marked(client, all_ledgers(client) - before - committed)
    assert staging_of(client, log_name) == []


@pytest.mark.parametrize("fail_mode", ["raise", "exit"])
def test_a_job_that_fails_leaves_the_log_unchanged(spark: SparkSession, uri: str, log_name: str, client: LedgerClient,
                                                   fail_mode: str) -> None:
    write(spark.range(100), uri, log_name, payloadFormat="arrow")
    rec_before = client.describe_log(log_name)
    before = all_ledgers(client)
    df = spark.range(0, 40_000, numPartitions=2)
    with pytest.raises(Exception, match="injected failure|exited|crashed|Python worker"):
        write(df, uri, log_name, arrowBatchRows=1000, testFailAttempts=100, testFailMode=fail_mode)
    rec_after = client.describe_log(log_name)
    # The job took the log over when it started (one writer per log: its epoch), and appended nothing.
    assert rec_after.writer_epoch == rec_before.writer_epoch + 1
    assert replace(rec_after, writer_epoch=rec_before.writer_epoch) == rec_before
    assert read(spark, uri, log_name).count() == 100

    def cleaned() -> None:
        assert_gone_or_marked(client, all_ledgers(client) - before)
        assert staging_of(client, log_name) == []

    eventually(cleaned)


# ---- reading while a producer appends -------------------------------------------------------------------


def test_read_during_appends_returns_a_prefix_up_to_the_planned_lac(spark: SparkSession, uri: str, log_name: str) -> None:
    acked = [0]
    stop = threading.Event()
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            with LedgerClient(uri) as c, c.open_log_writer(log_name, rollover_entries=1500, batching=False) as w:
                i = 0
                while not stop.is_set() and i < 200_000:
                    w.append(f"{i:08d}".encode())  # waits for the ack: at most one entry in flight
                    i += 1
                    acked[0] = i
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    t = threading.Thread(target=produce, daemon=True)
    t.start()
    try:
        wait_on_progress("the producer's first 4000 appends", lambda: acked[0], lambda n: n >= 4000 or bool(errors),
                         poll_s=0.05)
        assert not errors and acked[0] >= 4000
        acked_before = acked[0]
        rows = read(spark, uri, log_name).select("seq", "entry", "payload").collect()
        acked_after = acked[0]
    finally:
        stop.set()
        t.join(timeout=60)
    assert not errors, errors
    rows.sort(key=lambda r: (r.seq, r.entry))
    payloads = [bytes(r.payload) for r in rows]
    # A consistent prefix: no gap, no duplicate, nothing past what was acknowledged ...
    assert payloads == [f"{i:08d}".encode() for i in range(len(payloads))]
    assert len(payloads) <= acked_after
    # ... ending at the LAC seen at planning: with one entry in flight a bookie's LAC trails the
    # writer's acknowledgements by at most one entry.
    assert len(payloads) >= acked_before - 1
    assert len({r.seq for r in rows}) >= 2  # the read crossed rollovers (sealed + open ledgers)


def test_positions_bound_the_read(spark: SparkSession, uri: str, log_name: str, client: LedgerClient) -> None:
    with client.open_log_writer(log_name, rollover_entries=100, batching=False) as w:
        positions = [w.append(f"{i}".encode()) for i in range(350)]
    start, end = positions[120], positions[305]
    got = read(spark, uri, log_name, startingPosition=json.dumps(start.to_json()),
               endingPosition=json.dumps(end.to_json()), maxEntriesPerPartition=40)
    # The start is inclusive, the end exclusive (as Kafka's offsets).
    assert sorted(int(r.payload) for r in got.select("payload").collect()) == list(range(120, 305))
    assert read(spark, uri, log_name, startingPosition="latest").count() == 0
    # One ledger on its own, by qualified name.
    lid = positions[150].ledger_id
    one = spark.read.format("ledger").option("metadataServiceUri", uri).option("ledger", lid.qualified_name).load()
    assert sorted(int(r.payload) for r in one.select("payload").collect()) == list(range(100, 200))


# ---- options and errors ----------------------------------------------------------------------------------


def test_registered_by_hand_as_well(spark: SparkSession, uri: str, log_name: str) -> None:
    from pyspark_ledger.datasource.source import LedgerDataSource

    spark.dataSource.register(LedgerDataSource)
    write(spark.range(5).select(F.col("id").cast("string").cast("binary").alias("payload")), uri, log_name)
    assert read(spark, uri, log_name).count() == 5


def test_local_session_starts_python_workers_with_one_malloc_arena(spark: SparkSession) -> None:
    # local_spark_session's executor setting (READER_EXECUTOR_ENV) reaches the Python workers
    # (the same daemon-forked workers run reads and RDD functions): glibc reads MALLOC_ARENA_MAX
    # only at a process's start, so only the workers' own environment shows that it took effect.
    def arena_max(_: int) -> str:
        return os.environ.get("MALLOC_ARENA_MAX", "unset")

    seen = set(spark.sparkContext.parallelize(range(4), 2).map(arena_max).collect())
    assert seen == {os.environ.get("MALLOC_ARENA_MAX", "1")}


@pytest.mark.parametrize(
    "opts, option",
    [
        ({"maxEntriesPerPartition": "lots"}, "maxEntriesPerPartition"),
        ({"startingPosition": "tomorrow"}, "startingPosition"),
        ({"startingOffsets": "earliest"}, "startingOffsets"),
        ({"ledger": "12"}, "log"),
    ],
)
def test_bad_options_name_the_option(spark: SparkSession, uri: str, log_name: str, opts: dict[str, str], option: str) -> None:
    with pytest.raises(Exception, match=f'(?i)option "{option}"'):  # unknown keys arrive lower-cased
        read(spark, uri, log_name, **opts).count()


def test_missing_log_and_unreachable_store_fail_clearly(spark: SparkSession, uri: str, log_name: str) -> None:
    started = time.monotonic()
    with pytest.raises(Exception, match=f"no log named '{log_name}'"):
        read(spark, uri, log_name).count()
    quick_failure_s = time.monotonic() - started  # what a failing Spark call costs on this machine now
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dead = f"zk://127.0.0.1:{port}/ledgers?connect_timeout_ms=1500"
    started = time.monotonic()
    with pytest.raises(Exception, match="metadataServiceUri"):
        spark.read.format("ledger").option("metadataServiceUri", dead).option("log", log_name).load().count()
    # Within the connect timeout, not the session's: relative to the machine's pace, not a fixed wall clock.
    assert time.monotonic() - started < 3 * quick_failure_s + 20
