"""Issue 34's acceptance, CI-sized: logs of sealed ledgers (raw with keys and headers, and Arrow)
offloaded to the moto S3 server by the elected autorecovery leader's task; the bookies' GC then
deletes their copies (offload_delete_after_ms=0); LogReader and `ledger logs read` return the same
messages and positions as before; the bookies' entry logs hold at most 10% of the offloaded bytes.

LEDGER_OFFLOAD_LEDGERS (default 12 per log; 200 in the long run) and LEDGER_OFFLOAD_TEST_MB (raw
payload megabytes, default 12) size it."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from metadata import log_settings
from metadata.cluster_settings import update_cluster_settings
from pyspark_ledger.autorecovery.offload_task import OffloadTaskSettings
from pyspark_ledger.autorecovery.service import AutorecoveryService, AutorecoverySettings
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.offload.offloaded_reads import store_for
from pyspark_ledger.offload.status import log_offload_status
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.testing.s3_server import LocalS3
from tests.offload.log_fill import fill_arrow, fill_raw, read_all

LEDGERS = int(os.environ.get("LEDGER_OFFLOAD_LEDGERS", "12"))
TEST_MB = int(os.environ.get("LEDGER_OFFLOAD_TEST_MB", "12"))
WAIT_S = 600.0  # generous: a shared, loaded machine


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    args = ["--gc-interval-s", "0", "--entry-log-size-mb", "1"]  # GC when the test asks; small entry logs
    with LocalCluster(3, metadata_uri=f"sqlite://{tmp_path / 'metadata.db'}", work_dir=tmp_path / "cluster",
                      bookie_args=args) as c:
        yield c


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


def test_offloaded_history_reads_the_same_after_the_bookies_dropped_it(cluster: LocalCluster, s3_env: LocalS3,
                                                                         tmp_path: Path) -> None:
    uri = "s3://acceptance/tier"
    store_for(uri).create_bucket_if_missing()
    logs = ["raw", "arrow"]
    with LedgerClient(cluster.metadata_uri, add_timeout_s=30) as client:
        per_ledger = max(6, TEST_MB * 2**20 // (LEDGERS * 8192))
        fill_raw(client, "raw", ledgers=LEDGERS, per_ledger=per_ledger, payload_bytes=8192)
        fill_arrow(client, "arrow", ledgers=LEDGERS)
        before = {n: read_all(client, n) for n in logs}
        before_cli = cli_read(cluster, "raw")
        update_cluster_settings(client.store, {"offload_store": uri})
        for n in logs:
            client.logs.update_head(n, lambda r: log_settings.with_settings(
                r, {"offload_after_ms": "0", "offload_delete_after_ms": "0"}))
        service = AutorecoveryService(client.context, AutorecoverySettings(
            workers=0, offload=OffloadTaskSettings(interval_s=0.2)), offload_client=client).start()
        try:
            def all_offloaded() -> bool:
                now = int(time.time() * 1000)
                return all(log_offload_status(client, client.describe_log(n), now).due_ledgers == 0 for n in logs)

            wait_until("the leader offloads every sealed ledger", all_offloaded)

            def metrics_caught_up() -> bool:  # refreshed after each pass: lag 0, bytes as offloaded
                r = service.metrics.registry
                return all(r.get_sample_value("autorecovery_offload_lag_ms", {"log": n}) == 0
                           and (r.get_sample_value("autorecovery_offloaded_bytes", {"log": n}) or 0) > 0 for n in logs)

            wait_until("the per-log offload metrics show the offload", metrics_caught_up)
            assert (service.metrics.registry.get_sample_value("autorecovery_offloaded_ledgers_total") or 0) >= 2 * LEDGERS
        finally:
            service.stop()
        now = int(time.time() * 1000)
        status = [log_offload_status(client, client.describe_log(n), now) for n in logs]
        sealed = [sum(1 for lg in client.describe_log(n).ledgers if lg.sealed) for n in logs]
        assert [s.offloaded_ledgers for s in status] == sealed and min(sealed) >= LEDGERS
        offloaded_bytes = sum(s.offloaded_bytes for s in status)
        on_disk_before = entry_log_bytes(cluster)
        for b in client.bookies():
            for _ in client.pool.get(b.bookie_id).trigger_gc(timeout_s=300):
                pass
        on_disk = entry_log_bytes(cluster)
        print(f"offloaded {offloaded_bytes} bytes; bookies' entry logs {on_disk_before} -> {on_disk} bytes")
        assert on_disk <= 0.10 * offloaded_bytes, (on_disk, offloaded_bytes)
        for n in logs:
            assert read_all(client, n) == before[n], n
    assert cli_read(cluster, "raw") == before_cli
