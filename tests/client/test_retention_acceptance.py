"""Issue 32's acceptance for retention, with real processes:

- a log written at about 1 MB/s with max_size_bytes 50 MB stays at or under 50 MB plus one
  ledger with no trim command: a real `ledger autorecovery` process, whose elected leader applies
  retention every half second (the bound holds while a pass follows each 5-second ledger's
  seal), and a LogWriter that rolls over by the log's settings (5 MB ledgers).
  LEDGER_RETENTION_SOAK_S seconds (120 in the suite; 600 for the long run), at
  LEDGER_RETENTION_SCALE times the sizes and rate (1.0: 1 MB/s, 50 MB, 5 MB ledgers; the
  ratios stay the same at any scale);
- rounds of `ledger retention run` processes (some killed with SIGKILL mid-pass, then run again)
  against subscriptions at seeded positions and both backlog policies: never a ledger at or after
  a subscription under `keep`; under `trim` every subscription left behind is marked lost; a
  finished pass leaves no trimmed ledger undeleted. LEDGER_RETENTION_ROUNDS (3; 20 long).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest

from metadata import NoSuchLedgerError, log_settings, log_trim_marks
from metadata.log_record import LogLedger, Retention
from metadata.subscriptions import SubscriptionStore
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.log import Position
from pyspark_ledger.testing.local_cluster import LocalCluster

REPO = Path(__file__).resolve().parents[2]
SOAK_S = float(os.environ.get("LEDGER_RETENTION_SOAK_S", "120"))
SCALE = float(os.environ.get("LEDGER_RETENTION_SCALE", "1.0"))
ROUNDS = int(os.environ.get("LEDGER_RETENTION_ROUNDS", "3"))
MB = 1_000_000
MESSAGE_BYTES = 10_000
IN_FLIGHT_MAX = 50
WAIT_S = 180.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(3, work_dir=tmp_path / "cluster") as c:
        yield c


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[LedgerClient]:
    with LedgerClient(cluster.metadata_uri, add_timeout_s=30) as c:
        yield c


def ledger_cmd(uri: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "pyspark_ledger.cli", "--metadata-uri", uri, *args]


def spawn(cmd: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as logf:
        return subprocess.Popen(cmd, cwd=REPO, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONPATH": str(REPO)})


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def test_a_log_written_at_1mb_s_stays_within_its_size_bound(client: LedgerClient, cluster: LocalCluster,
                                                            tmp_path: Path) -> None:
    max_size, ledger_bytes, rate = int(50 * MB * SCALE), int(5 * MB * SCALE), 1 * MB * SCALE
    with client.open_log_writer("soak", batching=False):
        pass  # makes the log; its settings apply to the next writer
    client.logs.update_head("soak", lambda r: log_settings.with_settings(
        r.with_retention(Retention(max_size_bytes=max_size)), {"rollover_max_bytes": str(ledger_bytes)}))
    service = spawn(ledger_cmd(cluster.metadata_uri, "autorecovery", "--workers", "0", "--retention-interval-s", "0.5"),
                    tmp_path / "autorecovery.log")
    sealed_max = written = 0
    try:
        with client.open_log_writer("soak", batching=False) as w:
            assert w.rollover.max_bytes == ledger_bytes  # from the log's settings, no argument
            start = time.monotonic()
            pending: list[Future[Position]] = []
            next_sample = start
            while time.monotonic() - start < SOAK_S:
                due = int((time.monotonic() - start) * rate) // MESSAGE_BYTES  # messages by now at the rate
                while written // MESSAGE_BYTES < due and len(pending) < IN_FLIGHT_MAX:
                    pending.append(w.append_async(os.urandom(16) * (MESSAGE_BYTES // 16)))
                    written += MESSAGE_BYTES
                if len(pending) >= IN_FLIGHT_MAX or time.monotonic() >= next_sample:
                    for f in pending:
                        f.result(timeout=WAIT_S)
                    pending.clear()
                if time.monotonic() >= next_sample:
                    sealed_max = max(sealed_max, client.describe_log("soak").size_bytes)
                    next_sample += 0.5
                time.sleep(0.005)
            for f in pending:
                f.result(timeout=WAIT_S)
            elapsed = time.monotonic() - start
        assert service.poll() is None, (tmp_path / "autorecovery.log").read_text()[-3000:]
        rec = client.describe_log("soak")
        counts = log_trim_marks.retention_counts(rec)
        print(f"retention soak: {written / MB:.1f} MB in {elapsed:.0f} s ({written / MB / elapsed:.2f} MB/s), "
              f"log max {sealed_max / MB:.1f} MB in sealed ledgers (bound {max_size / MB:.0f} MB + one "
              f"{ledger_bytes / MB:.0f} MB ledger), {counts.ledgers} ledgers / {counts.bytes / MB:.1f} MB trimmed in "
              f"{counts.passes} passes, {len(rec.ledgers)} ledgers at the end")
    finally:
        stop(service)
    assert written >= 1.5 * max_size or SOAK_S < 120, "the log was not written well past its bound"
    assert counts.ledgers > 0, "retention never trimmed"
    assert sealed_max <= max_size + ledger_bytes, f"the log held {sealed_max} bytes > {max_size} + one ledger"


def check_round(before: list[LogLedger], trim_seq: int, subs_before: dict[str, int], policy: str,
                store: SubscriptionStore, client: LedgerClient) -> None:
    gone = [lg for lg in before if lg.seq < trim_seq]
    for name, seq in subs_before.items():
        if any(lg.seq >= seq for lg in gone):  # a ledger at or after the subscription went
            assert policy == "trim", f"{name} at seq {seq}: trimmed to {trim_seq} under policy keep"
            assert store.read("retained", name).lost_before_seq == trim_seq, f"{name} not marked lost"
    for lg in gone:
        with pytest.raises(NoSuchLedgerError):
            client.ledger_metadata(lg.ledger_id)  # a finished pass deleted what it trimmed


def test_rounds_of_retention_processes_with_subscriptions(client: LedgerClient, cluster: LocalCluster,
                                                          tmp_path: Path) -> None:
    seed = int(os.environ.get("LEDGER_TEST_SEED", "32"))
    rng = random.Random(seed)
    store = SubscriptionStore(client.store)
    with client.open_log_writer("retained", batching=False):
        pass
    for r in range(ROUNDS):
        policy = rng.choice(("keep", "trim"))
        client.logs.update_head("retained", lambda rec: log_settings.with_settings(
            rec.with_retention(Retention(max_size_bytes=rng.choice((0, 500, 2_000)))),
            {"backlog_policy": policy, "backlog_quota_bytes": str(rng.choice((0, 1_000)))}))
        with client.open_log_writer("retained", batching=False, rollover_entries=5) as w:
            for i in range(rng.randrange(10, 40)):
                w.append(b"r%03d-%04d" % (r, i) + bytes(90))
        before = list(client.describe_log("retained").ledgers)
        for name in ("etl", "audit"):
            if store.get("retained", name) is None:
                store.create("retained", name)
            lg = rng.choice(before)
            store.move("retained", name, None) if rng.random() < 0.2 else store.commit(
                "retained", name, lg.seq, rng.randrange(0, 5), allow_backward=True)
        subs_before = {s.name: s.holds_from_seq for s in store.list("retained")}
        proc = spawn(ledger_cmd(cluster.metadata_uri, "retention", "run", "--log", "retained"), tmp_path / f"r{r}.log")
        if rng.random() < 0.5:  # kill -9 somewhere in the pass: the next one finishes its work
            time.sleep(rng.uniform(0.5, 3.0))
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=WAIT_S)
        done = subprocess.run(ledger_cmd(cluster.metadata_uri, "--json", "retention", "run", "--log", "retained"),
                              cwd=REPO, capture_output=True, text=True, timeout=WAIT_S,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        assert done.returncode == 0, done.stderr
        print(f"round {r} (seed {seed}) policy={policy}: {json.loads(done.stdout)}")
        trim_seq = client.log_summary("retained").trim_seq
        check_round(before, trim_seq, subs_before, policy, store, client)
