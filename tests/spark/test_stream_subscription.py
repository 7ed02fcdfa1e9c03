"""Option `subscription` of the streaming source (issue 32 item 2): every committed micro-batch
moves the log's durable subscription, a query without a checkpoint starts from it, and a driver
killed with kill -9 and restarted WITHOUT its checkpoint resumes from it with no gap and at most
one micro-batch written twice (a new checkpoint is a new query id, so the sink cannot know the
batch). With its checkpoint the same query is exactly once: test_streaming's kill -9 test runs
with the option. Batch reads neither start from nor move a subscription."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from metadata.subscriptions import SubscriptionPosition, SubscriptionStore
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.datasource.read.cuts import DataLossError
from pyspark_ledger.datasource.stream.offsets import LogOffset
from pyspark_ledger.datasource.stream.subscription import commit_subscription, stored_position, subscription_start
from pyspark_ledger.testing.progress import await_query, wait_on_progress
from pyspark_ledger.testing.stream_start import start_query
from tests.spark.stream_driver import BATCH_ENTRIES_MAX, kill_driver, start_driver
from tests.spark.test_streaming import DRIVER_RUN_S, log_payloads, produce, stream


def test_offsets_and_stored_positions_round_trip() -> None:
    assert stored_position(LogOffset(3, 0)) == SubscriptionPosition.before_ledger(3)
    assert stored_position(LogOffset(3, 10)) == SubscriptionPosition.after_entry(3, 9)


def test_commits_make_and_move_the_subscription_and_a_loss_is_data_loss(client: LedgerClient, log_name: str) -> None:
    produce(client, log_name, 30, rollover=10)
    assert subscription_start(client, log_name, "etl", True) is None  # none yet: the starting options decide
    commit_subscription(client, {log_name: LogOffset(1, 4)}, "etl")  # made by the first commit
    commit_subscription(client, {log_name: LogOffset(1, 2)}, "etl")  # a late commit: ignored
    assert subscription_start(client, log_name, "etl", True) == LogOffset(1, 4, _ledger(client, log_name, 1))
    commit_subscription(client, {log_name: LogOffset(2, 0)}, "etl")
    assert subscription_start(client, log_name, "etl", True) == LogOffset(2, 0, _ledger(client, log_name, 2))
    SubscriptionStore(client.store).mark_lost(log_name, "etl", 3, 10)
    with pytest.raises(DataLossError, match="subscription 'etl' lost 10 entries.*ledger subscriptions move"):
        subscription_start(client, log_name, "etl", True)
    went_on = subscription_start(client, log_name, "etl", False)  # failOnDataLoss=false: goes on
    assert went_on is not None and (went_on.seq, went_on.entry) == (3, 0)


def _ledger(client: LedgerClient, log: str, seq: int) -> str:
    with client.open_log_reader(log) as r:
        lg = r.ledger_at_or_after(seq)
        assert lg is not None and lg.seq == seq
        return lg.ledger_id.qualified_name


def run_available_now(spark: SparkSession, uri: str, log: str, checkpoint: Path, **opts: str) -> list[bytes]:
    name = f"q{random.randrange(10**9)}"
    query = start_query(lambda: stream(spark, uri, log, subscription="etl", **opts).select("payload")
                        .writeStream.format("memory").queryName(name)
                        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    await_query(query)
    rows = [bytes(r.payload) for r in spark.table(name).collect()]
    spark.catalog.dropTempView(name)
    return rows


def test_committed_batches_move_the_subscription_and_a_new_query_starts_from_it(
        spark: SparkSession, client: LedgerClient, uri: str, log_name: str, tmp_path: Path) -> None:
    first = produce(client, log_name, 200, rollover=100)
    got = run_available_now(spark, uri, log_name, tmp_path / "c1", maxEntriesPerTrigger="120")
    assert got == first
    sub = SubscriptionStore(client.store).read(log_name, "etl")
    assert sub.position is not None and sub.position.seq >= 1  # moved by the committed batches (all but maybe the last)
    with client.open_log_reader(log_name, subscription="etl", initial_position="none") as r:
        unread = [e.payload for e in r.read()]
    assert unread == first[len(first) - len(unread):] and len(unread) <= 120  # at most the last batch
    # A new query (new checkpoint) starts after the subscription, not at startingPosition.
    produce(client, log_name, 50, rollover=100)
    again = run_available_now(spark, uri, log_name, tmp_path / "c2", startingPosition="earliest")
    assert again == unread + [b"event-%05d" % i for i in range(50)]


def test_batch_reads_and_sinks_refuse_the_option(spark: SparkSession, client: LedgerClient, uri: str,
                                                 log_name: str, tmp_path: Path) -> None:
    produce(client, log_name, 3)
    with pytest.raises(Exception, match="subscription.*batch read neither starts from nor moves"):
        spark.read.format("ledger").option("metadataServiceUri", uri).option("log", log_name) \
            .option("subscription", "etl").load().collect()
    with pytest.raises(Exception, match="subscription.*readStream, not of writeStream"):
        q = (spark.readStream.format("rate").load().select(F.col("value").cast("string").cast("binary").alias("payload"))
             .writeStream.format("ledger").option("metadataServiceUri", uri).option("log", log_name)
             .option("subscription", "etl").option("checkpointLocation", str(tmp_path / "sink")).start())
        try:
            q.awaitTermination(180)  # the sink is made when the query starts: its error ends the query
        finally:
            q.stop()


def test_kill9_and_restart_without_the_checkpoint_resumes_from_the_subscription(
        client: LedgerClient, uri: str, log_name: str, tmp_path: Path) -> None:
    seed = int(os.environ.get("LEDGER_TEST_SEED", "3232"))
    print(f"seed={seed} (replay: LEDGER_TEST_SEED={seed})")
    rng = random.Random(seed)
    payloads = produce(client, log_name, 2000)
    expected = [x + b"!" for x in payloads]
    sink = log_name + "-out"
    subs = SubscriptionStore(client.store)
    p = start_driver(uri, log_name, sink, tmp_path / "lost-checkpoint", DRIVER_RUN_S, subscription="etl")
    try:
        assert p.stdout is not None
        line = p.stdout.readline()
        assert line.startswith("STARTED"), line
        # At least two micro-batches committed (so the subscription was committed once), then a random moment.
        wait_on_progress("the first run's commits", lambda: (len(log_payloads(client, sink)), subs.get(log_name, "etl")),
                         lambda seen: seen[0] >= 2 * BATCH_ENTRIES_MAX and seen[1] is not None,
                         alive=lambda: p.poll() is None, poll_s=0.1)
        time.sleep(rng.uniform(0.0, 1.5))
    finally:
        kill_driver(p)
    before = log_payloads(client, sink)
    assert 0 < len(before) < len(expected), "the kill must land while the stream makes progress"
    # The same query restarted without its checkpoint: it can only know where to go on from the subscription.
    p = start_driver(uri, log_name, sink, tmp_path / "new-checkpoint", DRIVER_RUN_S, subscription="etl")
    try:
        wait_on_progress("the run without the checkpoint", lambda: log_payloads(client, sink),
                         lambda out: set(out) == set(expected), alive=lambda: p.poll() is None, poll_s=1.0)
    finally:
        kill_driver(p)
    out = log_payloads(client, sink)
    assert out[: len(before)] == before
    resumed_at = expected.index(out[len(before)]) if len(out) > len(before) else len(expected)
    repeated = len(before) - resumed_at
    print(f"output before the kill: {len(before)} entries; the restart resumed at {resumed_at}: {repeated} repeated")
    assert out[len(before):] == expected[resumed_at:], "no gap and no reordering after the restart"
    assert 0 <= repeated <= BATCH_ENTRIES_MAX, "at most one micro-batch written twice"
