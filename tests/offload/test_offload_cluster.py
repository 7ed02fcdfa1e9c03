"""Offload to a directory and to a real S3 API (moto on loopback), with real bookies: the logs read
back the same messages and positions with every bookie stopped (reads never touch a bookie)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from metadata.offload_queue import queued
from metadata.offload_record import offload_record
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.offload.offloaded_reads import store_for
from pyspark_ledger.offload.offloader import offload_pass
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.testing.s3_server import LocalS3
from tests.offload.log_fill import fill_arrow, fill_raw, read_all


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(3, metadata_uri=f"sqlite://{tmp_path / 'metadata.db'}", work_dir=tmp_path / "cluster") as c:
        yield c


@pytest.fixture(params=["file", "s3"])
def store_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return f"file://{tmp_path / 'offload'}"
    s3: LocalS3 = request.getfixturevalue("s3_env")
    uri = f"s3://ledgers-{tmp_path.name.lower().replace('_', '-')[:40]}/tier"
    store_for(uri).create_bucket_if_missing()
    assert s3.endpoint
    return uri


def test_offloaded_logs_read_the_same_with_every_bookie_stopped(cluster: LocalCluster, store_uri: str) -> None:
    with LedgerClient(cluster.metadata_uri, add_timeout_s=10) as client:
        fill_raw(client, "raw", ledgers=4)
        fill_arrow(client, "arrow", ledgers=3)
        before = {name: read_all(client, name) for name in ("raw", "arrow")}
        assert any(m[5] is not None for m in before["raw"]) and any(m[8] for m in before["raw"])  # keys, headers

        first = offload_pass(client, store=store_uri, everything=True)
        sealed = {name: [lg for lg in client.describe_log(name).ledgers if lg.sealed] for name in ("raw", "arrow")}
        assert sorted(first.offloaded) == sorted((n, lg.seq) for n, lgs in sealed.items() for lg in lgs)
        assert first.bytes_offloaded > 0 and not first.skipped
        again = offload_pass(client, store=store_uri, everything=True)
        assert again.offloaded == [] and again.bytes_offloaded == 0  # never offloaded twice

        recorded = set()
        for lgs in sealed.values():
            for lg in lgs:
                rec = offload_record(client.ledgers.read(lg.ledger_id)[0])
                assert rec is not None and rec.offloaded and rec.store == store_uri
                recorded.update(f.name for f in rec.files)
        store = store_for(store_uri)
        assert {o.name for o in store.list("raw")} | {o.name for o in store.list("arrow")} == recorded  # no orphan
        assert len(list(queued(client.store, 1000))) == len(recorded)  # each file's queue entry stays while live

    for b in cluster.bookies:
        b.stop()
    with LedgerClient(cluster.metadata_uri, add_timeout_s=10, rpc_timeout_s=2) as client:
        for name, rows in before.items():
            assert read_all(client, name) == rows, name
