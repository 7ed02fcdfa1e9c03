"""Structured streaming: an exactly-once ledger sink and a LAC-bounded ledger source."""

from __future__ import annotations

import os
import random
import subprocess
import threading
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from metadata.subscriptions import SubscriptionStore
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.datasource.options.source_options import OptionError
from pyspark_ledger.datasource.stream.admission import Limit, admit, offset_after
from pyspark_ledger.datasource.stream.offsets import LogOffset
from pyspark_ledger.datasource.stream.scan import scan_log
from pyspark_ledger.datasource.stream.sink import StreamSettings, parse_stream_options
from pyspark_ledger.log.subscription import lag
from pyspark_ledger.testing.progress import await_query, query_running, wait_on_progress
from pyspark_ledger.testing.stream_start import start_query
from tests.spark.stream_driver import BATCH_ENTRIES_MAX, kill_driver, start_driver

# Each kill starts a Spark driver (~30 s here): 3 in CI keeps the suite's time; LEDGER_STREAM_KILLS=10 for a
# longer run.
KILLS = int(os.environ.get("LEDGER_STREAM_KILLS", "3"))
DRIVER_RUN_S = 3600  # a driver runs until killed; this only ends one a crashed test left behind


def produce(client: LedgerClient, name: str, n: int, rollover: int = 400) -> list[bytes]:
    with client.open_log_writer(name, rollover_entries=rollover, batching=False) as w:
        payloads = [b"event-%05d" % i for i in range(n)]
        futures = [w.append_async(p) for p in payloads]
        for f in futures:
            f.result(timeout=60)
    return payloads


def log_payloads(client: LedgerClient, name: str) -> list[bytes]:
    if name not in client.list_logs():
        return []
    with client.open_log_reader(name) as r:
        return [e.payload for e in r.read()]


def stream(spark: SparkSession, uri: str, source: str, **opts: str):
    return spark.readStream.format("ledger").option("metadataServiceUri", uri).option("log", source).options(**opts).load()


def test_stream_options_are_checked() -> None:
    with pytest.raises(OptionError, match="maxEntriesPerTrigger"):
        parse_stream_options({"metadataserviceuri": "sqlite:///tmp/x.db", "log": "a", "maxentriespertrigger": "0"})
    with pytest.raises(OptionError, match="failOnDataLoss"):
        parse_stream_options({"metadataserviceuri": "sqlite:///tmp/x.db", "log": "a", "failondataloss": "maybe"})
    opts, settings = parse_stream_options({"metadataserviceuri": "sqlite:///tmp/x.db", "log": "a", "maxbytespertrigger": "1000"})
    assert settings == StreamSettings(None, 1000, True) and opts.log == "a"


def test_offsets_follow_rollovers_and_limits(client: LedgerClient, uri: str, log_name: str) -> None:
    produce(client, log_name, 1000, rollover=300)
    opts, _ = parse_stream_options({"metadataserviceuri": uri, "log": log_name})
    rec = client.describe_log(log_name)
    head = client.logs.read_head(log_name)[0]
    start = LogOffset(rec.ledgers[0].seq, 0)
    scan = scan_log(client, opts, head, start)
    assert scan.entries == 1000 and scan.complete
    end = offset_after(scan, admit({log_name: scan}, Limit())[log_name])
    assert end == LogOffset(rec.next_seq, 0)  # after the last sealed ledger: where the next one goes
    limited = offset_after(scan, admit({log_name: scan}, Limit(max_entries=450))[log_name])
    assert (limited.seq, limited.entry, limited.ledger) == (rec.ledgers[1].seq, 150, rec.ledgers[1].ledger_id.qualified_name)
    assert scan_log(client, opts, head, end).entries == 0  # nothing new: the batch is empty


def test_sink_and_source_exactly_once_in_order_with_a_live_producer(spark: SparkSession, client: LedgerClient, uri: str,
                                                                    log_name: str, tmp_path: Path) -> None:
    sink = log_name + "-out"
    writer = client.open_log_writer(log_name, rollover_entries=150, batching=False)  # the source log must exist first
    out = stream(spark, uri, log_name, maxEntriesPerTrigger="100").select(F.col("payload"))
    query = start_query(lambda: out.writeStream.format("ledger").option("metadataServiceUri", uri).option("log", sink)
                        .option("checkpointLocation", str(tmp_path / "ckpt")).start())
    produced: list[bytes] = []

    def producer() -> None:
        with writer as w:
            for i in range(600):
                produced.append(b"live-%04d" % i)
                w.append(produced[-1])
                if i % 50 == 0:
                    time.sleep(0.1)

    t = threading.Thread(target=producer)
    t.start()
    wait_on_progress("the producer", lambda: len(produced), lambda n: n == 600, alive=t.is_alive)
    t.join(timeout=60)
    try:
        wait_on_progress("the sink", lambda: len(log_payloads(client, sink)), lambda n: n >= 600,
                         alive=query_running(query))
    finally:
        query.stop()
    assert log_payloads(client, sink) == produced
    sizes = [p["numInputRows"] for p in query.recentProgress]
    assert max(sizes) <= 100, sizes  # admission control held


def test_failure_in_commit_is_replayed_once(spark: SparkSession, client: LedgerClient, uri: str, log_name: str,
                                            tmp_path: Path) -> None:
    payloads = produce(client, log_name, 500)
    for when in ("after", "before"):
        sink = f"{log_name}-{when}"
        ckpt = str(tmp_path / when)

        def run(fail: bool) -> None:
            opts = {"metadataServiceUri": uri, "log": sink, "checkpointLocation": ckpt}
            if fail:
                opts["testFailCommit"] = when
            q = start_query(stream(spark, uri, log_name).select("payload").writeStream.format("ledger")
                            .options(**opts).trigger(availableNow=True).start)
            await_query(q)

        with pytest.raises(Exception, match="injected commit failure"):
            run(fail=True)
        run(fail=False)  # restart from the checkpoint: Spark replays the failed batch
        assert log_payloads(client, sink) == payloads, when


def test_failOnDataLoss_when_the_start_was_trimmed(  # noqa: N802 - named after the Spark option it tests
        spark: SparkSession, client: LedgerClient, uri: str, log_name: str) -> None:
    produce(client, log_name, 300, rollover=100)
    rec = client.describe_log(log_name)
    start = f'{{"seq": {rec.ledgers[0].seq}, "ledger": "{rec.ledgers[0].ledger_id.qualified_name}", "entry": 0}}'
    from pyspark_ledger.log import Position

    client.trim_log(log_name, before=Position(rec.ledgers[1].seq, 0, rec.ledgers[1].ledger_id))
    got = start_query(stream(spark, uri, log_name, startingPosition=start, failOnDataLoss="false")
                      .writeStream.format("memory").queryName("dataloss_ok").trigger(availableNow=True).start)
    await_query(got)
    assert spark.table("dataloss_ok").count() == 200
    q = start_query(stream(spark, uri, log_name, startingPosition=start).writeStream.format("memory")
                    .queryName("dataloss_fail").trigger(availableNow=True).start)
    with pytest.raises(Exception, match="trimmed"):
        await_query(q)


def test_kill9_the_streaming_driver_repeatedly(client: LedgerClient, uri: str, log_name: str, tmp_path: Path) -> None:
    """Killed and restarted from its checkpoint: exactly once. The query also keeps a subscription
    (option `subscription`), which must change nothing of that and follow the stream."""
    seed = int(os.environ.get("LEDGER_TEST_SEED", "4242"))
    print(f"seed={seed} (replay: LEDGER_TEST_SEED={seed})")
    rng = random.Random(seed)
    payloads = produce(client, log_name, 3000)
    sink = log_name + "-out"
    ckpt = tmp_path / "checkpoint"

    def start(run_s: float) -> subprocess.Popen[str]:
        return start_driver(uri, log_name, sink, ckpt, run_s, subscription="etl")

    progress = []
    for _ in range(KILLS):
        before = len(log_payloads(client, sink))
        p = start(DRIVER_RUN_S)
        try:
            assert p.stdout is not None
            line = p.stdout.readline()  # STARTED: the query is running
            assert line.startswith("STARTED"), line
            # Let this run commit at least one micro-batch, then kill it at a random moment
            # (often in the middle of the next batch's tasks or commit).
            wait_on_progress("the restarted stream's first commit", lambda: len(log_payloads(client, sink)),
                             lambda n: n > before, alive=lambda: p.poll() is None, poll_s=0.1)
            time.sleep(rng.uniform(0.0, 1.5))
        finally:
            kill_driver(p)
        progress.append(len(log_payloads(client, sink)))
    print("output entries after each kill:", progress)
    assert progress[-1] > progress[0] > 0, "the kills must land while the stream makes progress"
    # The final run: waits on progress (the sink's growth), however slow the machine is.
    p = start(DRIVER_RUN_S)
    try:
        wait_on_progress("the final run", lambda: len(log_payloads(client, sink)), lambda n: n >= len(payloads),
                         alive=lambda: p.poll() is None, poll_s=1.0)
    finally:
        kill_driver(p)
    out = log_payloads(client, sink)
    assert len(out) == len(set(out)), "an entry was written twice"
    assert out == [x + b"!" for x in payloads]
    # The subscription followed the committed batches: at most the last one (whose commit Spark
    # makes when it plans the next) is not in it yet.
    with client.open_log_reader(log_name) as r:
        behind = lag(r, SubscriptionStore(client.store).read(log_name, "etl"), int(time.time() * 1000))
    assert behind.entries <= BATCH_ENTRIES_MAX, behind
