"""Offload to a directory and to a real S3 API (moto on loopback), with real bookies: the logs read
back the same messages and positions with every bookie stopped (reads never touch a bookie)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from metadata import log_settings
from metadata.offload_queue import queued
from metadata.offload_record import offload_record
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.errors import PySparkLedgerError
from pyspark_ledger.log import Position
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


def test_trims_and_deletes_take_offloaded_files_and_the_shell_shows_them(
        cluster: LocalCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pyspark_ledger.cli.app import main

    store_uri = f"file://{tmp_path / 'offload'}"
    store = store_for(store_uri)
    with LedgerClient(cluster.metadata_uri, add_timeout_s=10) as client:
        fill_raw(client, "raw", ledgers=4)
        fill_arrow(client, "arrow", ledgers=2)
        client.logs.update_head("raw", lambda r: log_settings.with_settings(r, {"offload_after_ms": "0"}))
    os.environ["LEDGER_METADATA_URI"] = cluster.metadata_uri
    try:
        assert main(["offload", "run", "--store", store_uri, "--json"]) == 0  # only "raw" has settings
        ran = json.loads(capsys.readouterr().out)
        assert {o["log"] for o in ran["offloaded"]} == {"raw"} and ran["bytesOffloaded"] > 0
        assert main(["offload", "run", "--store", store_uri, "--now", "--log", "arrow", "--json"]) == 0
        assert {o["log"] for o in json.loads(capsys.readouterr().out)["offloaded"]} == {"arrow"}
        assert main(["offload", "status", "--json"]) == 0
        status = {s["log"]: s for s in json.loads(capsys.readouterr().out)["logs"]}
        assert status["raw"]["offloadedLedgers"] == status["raw"]["ledgers"] and status["raw"]["dueLedgers"] == 0
        assert status["arrow"]["offloadedBytes"] > 0
        assert main(["logs", "show", "raw", "--json"]) == 0
        shown = json.loads(capsys.readouterr().out)
        assert shown["offload"]["offloadedLedgers"] == status["raw"]["offloadedLedgers"]
    finally:
        os.environ.pop("LEDGER_METADATA_URI", None)
    with LedgerClient(cluster.metadata_uri, add_timeout_s=10) as client:
        raw_before = len(store.list("raw"))
        rec = client.describe_log("raw")
        trimmed = client.trim_log("raw", before=Position(rec.ledgers[2].seq, 0, rec.ledgers[2].ledger_id))
        assert len(trimmed) == 2
        client.delete_log("arrow")
        offload_pass(client, store=store_uri, logs=[])  # the queue: files of ledgers gone
        assert len(store.list("raw")) == raw_before - 2
        assert store.list("arrow") == []
        assert len(list(queued(client.store, 1000))) == raw_before - 2


def test_a_mac_ledger_is_offloaded_only_with_its_password(cluster: LocalCluster, tmp_path: Path) -> None:
    store_uri = f"file://{tmp_path / 'offload'}"
    with LedgerClient(cluster.metadata_uri, add_timeout_s=10) as client:
        w = client.open_log_writer("secret", digest_type="mac", password=b"pw", rollover_entries=2, batching=False)
        for i in range(4):
            w.append(f"m{i}".encode())
        w.close()
        refused = offload_pass(client, store=store_uri, everything=True)
        assert refused.offloaded == [] and all("mac" in why for _, _, why in refused.skipped) and refused.skipped
        done = offload_pass(client, store=store_uri, everything=True, password=lambda log: b"pw")
        assert len(done.offloaded) == len(refused.skipped)
        with client.open_log_reader("secret", password=b"pw") as r:
            assert [m.payload for m in r.read()] == [f"m{i}".encode() for i in range(4)]
        with pytest.raises(PySparkLedgerError), client.open_log_reader("secret", password=b"wrong") as r:
            list(r.read())
