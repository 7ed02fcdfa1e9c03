"""Issue 34's acceptance, CI-sized, for both kinds of store (the moto S3 server and a directory):
logs of sealed ledgers (raw with keys and headers, and Arrow) offloaded by the elected
autorecovery leader's task; the bookies' GC then deletes their copies (offload_delete_after_ms=0)
and their entry logs hold at most 10% of the offloaded bytes; LogReader, `ledger logs read`, a
Spark batch read and a Spark readStream from earliest return the same rows and positions as
before. Spark's executors read the offloaded ranges straight from the store (no bookie has them
any more); for S3 they get the store's settings through `executor_env` (the shared session was
started before the moto server: pyspark_ledger/testing/spark_executor_env.py).

LEDGER_OFFLOAD_LEDGERS (default 12 per log; 200 in the long run) and LEDGER_OFFLOAD_TEST_MB (raw
payload megabytes, default 12) size it."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from metadata import log_settings
from metadata.cluster_settings import update_cluster_settings
from pyspark_ledger.autorecovery.offload_task import OffloadTaskSettings
from pyspark_ledger.autorecovery.service import AutorecoveryService, AutorecoverySettings
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.offload.offloaded_reads import store_for
from pyspark_ledger.offload.status import log_offload_status
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.testing.micro_batch_driver import SPARK_WORKER_START_FAILURE
from pyspark_ledger.testing.s3_server import LocalS3
from pyspark_ledger.testing.spark_executor_env import executor_env
from tests.offload.log_fill import fill_arrow, fill_raw, read_all

LEDGERS = int(os.environ.get("LEDGER_OFFLOAD_LEDGERS", "12"))
TEST_MB = int(os.environ.get("LEDGER_OFFLOAD_TEST_MB", "12"))
WAIT_S = 600.0  # generous: a shared, loaded machine
LOGS = ("raw", "arrow")
STREAM_STARTS_MAX = 3

SparkRow = tuple[object, ...]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    args = ["--gc-interval-s", "0", "--entry-log-size-mb", "1"]  # GC when the test asks; small entry logs
    with LocalCluster(3, metadata_uri=f"sqlite://{tmp_path / 'metadata.db'}", work_dir=tmp_path / "cluster",
                      bookie_args=args) as c:
        yield c


@pytest.fixture(params=["s3", "dir"])
def store(request: pytest.FixtureRequest, spark: SparkSession, tmp_path: Path) -> Iterator[str]:
    """The offload store's URI; for S3, its settings in this process's environment (the leader's
    task, the CLI) and in the `ledger` source's Python workers (the session is already running)."""
    if request.param == "dir":
        yield f"file://{tmp_path / 'tier'}"
        return
    s3: LocalS3 = request.getfixturevalue("s3_env")
    uri = f"s3://acceptance/tier-{uuid.uuid4().hex[:8]}"
    store_for(uri).create_bucket_if_missing()
    with executor_env(spark, s3.env()):
        yield uri


def entry_log_bytes(cluster: LocalCluster) -> int:
    return sum(p.stat().st_size for b in cluster.bookies for p in b.data_dir.rglob("*.log") if p.parent.name == "entries")


def wait_until(what: str, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if done():
            return
        time.sleep(0.5)
    raise AssertionError(f"not within {WAIT_S}s: {what}")


def cli_read(cluster: LocalCluster, name: str) -> list[tuple[int, str, int, int, bytes]]:
    env = {**os.environ, "LEDGER_METADATA_URI": cluster.metadata_uri}
    out = subprocess.run([sys.executable, "-m", "pyspark_ledger.cli", "logs", "read", name, "--limit", "1000000",
                          "--json"], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return [(m["seq"], m["ledger"], m["entry"], m["index"], base64.b64decode(m["payloadBase64"]))
            for m in json.loads(out.stdout)]


def by_position(rows: list[SparkRow], columns: list[str]) -> list[SparkRow]:
    """Rows in log order; every row says where it is (seq, ledger, entry, index), so no two tie."""
    at = [columns.index(c) for c in ("seq", "entry", "index")]
    return sorted(rows, key=lambda r: cast("tuple[int, ...]", tuple(r[i] for i in at)))


def spark_batch(spark: SparkSession, uri: str, name: str) -> list[SparkRow]:
    df = (spark.read.format("ledger").option("metadataServiceUri", uri).option("log", name)
          .option("includeHeaders", "true").load())
    return by_position([tuple(r) for r in df.collect()], df.columns)


def spark_stream(spark: SparkSession, uri: str, name: str, checkpoint: Path) -> list[SparkRow]:
    """A readStream from earliest into a memory sink, run to the end of what is there
    (availableNow), awaited with a generous bound. A query whose Python worker missed Spark's own
    ~10 s bound to connect back (a machine loaded far past its cores; before any of this package's
    code ran) is started again with a new checkpoint, at most STREAM_STARTS_MAX times."""
    for attempt in range(STREAM_STARTS_MAX):
        table = "offload_acceptance_" + uuid.uuid4().hex[:8]
        q = (spark.readStream.format("ledger").option("metadataServiceUri", uri).option("log", name)
             .option("startingPosition", "earliest").option("includeHeaders", "true").load()
             .writeStream.format("memory").queryName(table)
             .option("checkpointLocation", str(checkpoint / str(attempt))).trigger(availableNow=True).start())
        try:
            assert q.awaitTermination(int(WAIT_S)), f"the stream of {name} did not finish within {WAIT_S}s"
        except StreamingQueryException as exc:
            if SPARK_WORKER_START_FAILURE not in str(exc) or attempt + 1 == STREAM_STARTS_MAX:
                raise
            continue
        finally:
            q.stop()
        df = spark.table(table)
        return by_position([tuple(r) for r in df.collect()], df.columns)
    raise AssertionError("unreachable")


def offload_by_the_leader(client: LedgerClient, store: str) -> int:
    """The elected leader's task offloads every sealed ledger of LOGS to `store`; returns the
    offloaded bytes once the per-log metrics show it."""
    update_cluster_settings(client.store, {"offload_store": store})
    for n in LOGS:
        client.logs.update_head(n, lambda r: log_settings.with_settings(
            r, {"offload_after_ms": "0", "offload_delete_after_ms": "0"}))
    service = AutorecoveryService(client.context, AutorecoverySettings(
        workers=0, offload=OffloadTaskSettings(interval_s=0.2)), offload_client=client).start()
    try:
        def all_offloaded() -> bool:
            now = int(time.time() * 1000)
            return all(log_offload_status(client, client.describe_log(n), now).due_ledgers == 0 for n in LOGS)

        wait_until("the leader offloads every sealed ledger", all_offloaded)

        def metrics_caught_up() -> bool:  # refreshed after each pass: lag 0, bytes as offloaded
            r = service.metrics.registry
            return all(r.get_sample_value("autorecovery_offload_lag_ms", {"log": n}) == 0
                       and (r.get_sample_value("autorecovery_offloaded_bytes", {"log": n}) or 0) > 0 for n in LOGS)

        wait_until("the per-log offload metrics show the offload", metrics_caught_up)
        assert (service.metrics.registry.get_sample_value("autorecovery_offloaded_ledgers_total") or 0) >= 2 * LEDGERS
    finally:
        service.stop()
    now = int(time.time() * 1000)
    status = [log_offload_status(client, client.describe_log(n), now) for n in LOGS]
    sealed = [sum(1 for lg in client.describe_log(n).ledgers if lg.sealed) for n in LOGS]
    assert [s.offloaded_ledgers for s in status] == sealed and min(sealed) >= LEDGERS
    return sum(s.offloaded_bytes for s in status)


def drop_the_bookies_copies(cluster: LocalCluster, client: LedgerClient, offloaded_bytes: int) -> None:
    on_disk_before = entry_log_bytes(cluster)
    for b in client.bookies():
        for _ in client.pool.get(b.bookie_id).trigger_gc(timeout_s=300):
            pass
    on_disk = entry_log_bytes(cluster)
    print(f"offloaded {offloaded_bytes} bytes; bookies' entry logs {on_disk_before} -> {on_disk} bytes")
    assert on_disk <= 0.10 * offloaded_bytes, (on_disk, offloaded_bytes)


def test_offloaded_history_reads_the_same_after_the_bookies_dropped_it(cluster: LocalCluster, store: str,
                                                                         spark: SparkSession, tmp_path: Path) -> None:
    uri = cluster.metadata_uri
    with LedgerClient(uri, add_timeout_s=30) as client:
        per_ledger = max(6, TEST_MB * 2**20 // (LEDGERS * 8192))
        per_ledger += per_ledger % 2  # even: fill_raw's two-message entries fill whole ledgers exactly
        fill_raw(client, "raw", ledgers=LEDGERS, per_ledger=per_ledger, payload_bytes=8192)
        fill_arrow(client, "arrow", ledgers=LEDGERS)
        before = {n: read_all(client, n) for n in LOGS}
        before_cli = cli_read(cluster, "raw")
        before_spark = {n: spark_batch(spark, uri, n) for n in LOGS}
        # Spark's raw rows are LogReader's messages at the same positions (columns: payload, log,
        # seq, ledger, entry, index, timestamp, headers); Arrow entries hold 4 rows each.
        assert [(r[2], r[4], r[5], bytes(cast(bytearray, r[0]))) for r in before_spark["raw"]] == \
            [(m[0], m[2], m[3], m[4]) for m in before["raw"]]
        assert len(before_spark["arrow"]) == 4 * len(before["arrow"]) == 4 * 3 * LEDGERS
        drop_the_bookies_copies(cluster, client, offload_by_the_leader(client, store))
        for n in LOGS:
            assert read_all(client, n) == before[n], n
    assert cli_read(cluster, "raw") == before_cli
    for n in LOGS:
        assert spark_batch(spark, uri, n) == before_spark[n], n
        assert spark_stream(spark, uri, n, tmp_path / f"checkpoint-{n}") == before_spark[n], n


