"""Kill -9 of the offloading process at each step of an offload (issue 34): after every kill every
ledger stays readable (from its bookies or from the store, with the same messages), no record
says OFFLOADED unless its file is there and matches its checksum (so GC, which deletes the
bookies' copies only for OFFLOADED ledgers, never deletes a copy before its file was verified),
and one pass after the stale bound leaves no object that no record names.

LEDGER_OFFLOAD_KILL_ROUNDS sets the rounds (default 3; each kills once at each of the 5 steps)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import crc32c
import pytest

from metadata.offload_queue import queued
from metadata.offload_record import offload_record
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.offload.offload_ledger import STEPS
from pyspark_ledger.offload.offloaded_reads import store_for
from pyspark_ledger.offload.offloader import offload_pass
from pyspark_ledger.testing.local_cluster import LocalCluster
from tests.offload.log_fill import fill_arrow, fill_raw, read_all

ROUNDS = int(os.environ.get("LEDGER_OFFLOAD_KILL_ROUNDS", "3"))
STALE_MS = 3_000
CHILD = Path(__file__).with_name("offload_kill_proc.py")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(3, metadata_uri=f"sqlite://{tmp_path / 'metadata.db'}", work_dir=tmp_path / "cluster") as c:
        yield c


def check_recorded_files(client: LedgerClient, logs: list[str]) -> tuple[set[str], set[str]]:
    """(objects OFFLOADED records name, their attempts); each named object is there, intact."""
    names, attempts = set(), set()
    for name in logs:
        for lg in client.describe_log(name).ledgers:
            rec = offload_record(client.ledgers.read(lg.ledger_id)[0])
            if rec is None or not rec.offloaded:
                continue
            store = store_for(rec.store)
            for f in rec.files:
                data = store.get(f.name)
                assert len(data) == f.size_bytes and crc32c.crc32c(data) == f.crc32c, f.name
                names.add(f.name)
            attempts.add(rec.attempt)
    return names, attempts


def test_kill9_at_every_offload_step(cluster: LocalCluster, tmp_path: Path) -> None:
    store_uri = f"file://{tmp_path / 'offload'}"
    logs = ["raw", "arrow"]
    with LedgerClient(cluster.metadata_uri, add_timeout_s=10) as client:
        fill_raw(client, "raw", ledgers=ROUNDS * len(STEPS) // 2 + 2)
        fill_arrow(client, "arrow", ledgers=ROUNDS * len(STEPS) // 2 + 2)
        before = {n: read_all(client, n) for n in logs}
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        kills = 0
        for r in range(ROUNDS):
            for step in STEPS:
                # Each kill lands on the first ledger not offloaded yet, at `step`.
                out = subprocess.run([sys.executable, str(CHILD), cluster.metadata_uri, store_uri, step, "1",
                                      str(STALE_MS)], env=env, capture_output=True, timeout=300)
                assert out.returncode == -9, f"round {r} step {step}: {out.returncode} {out.stderr.decode()[-2000:]}"
                kills += 1
                for n in logs:
                    assert read_all(client, n) == before[n], f"round {r} step {step}: {n} reads differently"
                check_recorded_files(client, logs)
            # One pass after the stale bound: every object nobody records is gone.
            time.sleep(STALE_MS / 1000 + 0.5)
            offload_pass(client, store=store_uri, logs=[], stale_ms=STALE_MS)
            recorded, attempts = check_recorded_files(client, logs)
            store = store_for(store_uri)
            present = {o.name for n in logs for o in store.list(n)}
            assert present == recorded, f"round {r}: orphans {sorted(present - recorded)[:3]}"
            assert {q.attempt for q in queued(client.store, 10_000)} == attempts
        assert kills == ROUNDS * len(STEPS)
        offload_pass(client, store=store_uri, everything=True, stale_ms=STALE_MS)
        for n in logs:
            assert read_all(client, n) == before[n]
