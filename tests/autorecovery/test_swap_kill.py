"""Replica replacement as a resumable two-phase change (swap_record): a worker killed -9 right
after each step (prepared, copying, copied, committed) leaves a record; another worker finishes
every change with the replacement its predecessor prepared (or, committed, only cleans up), and
every entry then reads back exactly from each bookie of its write set. A record naming a
replacement that is gone is rolled back. Real bookies, real ZooKeeper, real worker processes.

Rounds: LEDGER_SWAP_KILL_ROUNDS (default 1; each round kills a worker at every step)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from metadata import LedgerId
from metadata.paths import REPLICA_SWAPS
from metadata.underreplication import REASON_DECOMMISSION, UnderReplicationManager
from pyspark_ledger.autorecovery.metrics import AutorecoveryMetrics
from pyspark_ledger.autorecovery.replication_worker import ReplicationWorker
from pyspark_ledger.autorecovery.rereplication import rereplicate
from pyspark_ledger.autorecovery.swap_record import STEP_COMMITTED, SWAP_STEPS, SwapRecords, new_record
from pyspark_ledger.client import LedgerClient
from tests.autorecovery.cluster_shape import (
    MIB,
    REPO,
    Written,
    check_every_copy,
    payload,
    start_cluster,
    zk_uri_with_short_sessions,
)

ROUNDS = int(os.environ.get("LEDGER_SWAP_KILL_ROUNDS", "1"))
FINISH_S_MAX = 90.0


def write_ledger(client: LedgerClient, ensemble: list[str], seed: int, written: Written) -> LedgerId:
    """Four 1 MiB entries between small ones: more than one copy batch (4 MiB), so a kill can land
    between batches."""
    w = client.create_ledger(3, 3, 2, ensemble=ensemble)
    data = [payload(seed, e, MIB if e % 2 == 0 else 300) for e in range(8)]
    for f in [w.add_entry_async(p) for p in data]:
        f.result(timeout=120)
    w.close()
    written.entries[w.ledger_id] = data
    return w.ledger_id


def kill_workers_at_each_step(uri: str, ledgers: dict[str, LedgerId], lost: str) -> None:
    procs = {step: subprocess.Popen([sys.executable, "-m", "tests.autorecovery.swap_worker", uri,
                                     ledgers[step].qualified_name, lost, step], cwd=REPO,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for step in SWAP_STEPS}
    for step, proc in procs.items():
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == -signal.SIGKILL, f"worker for step {step} exited {proc.returncode}:\n{out.decode()[-3000:]}"


def finish_with_another_worker(client: LedgerClient, ledgers: list[LedgerId], lost: str) -> None:
    marks = UnderReplicationManager(client.store)
    for lid in ledgers:
        marks.mark(lid, {lost}, REASON_DECOMMISSION, "test")
    worker = ReplicationWorker(client.context, "finisher", open_ledger_grace_s=0, poll_interval_s=0.2, password=b"",
                               metrics=AutorecoveryMetrics(), stop=threading.Event())
    deadline = time.monotonic() + FINISH_S_MAX  # the dead workers' claims expire with their sessions
    while marks.ledger_ids():
        assert time.monotonic() < deadline, f"marks left after {FINISH_S_MAX:g} s: {marks.ledger_ids()}"
        if not worker.work_once():
            time.sleep(0.2)


def test_a_worker_killed_at_each_step_of_a_swap_is_finished_by_another(zk_uri: str, tmp_path: Path) -> None:
    uri = zk_uri_with_short_sessions(zk_uri)
    cluster = start_cluster(uri, tmp_path / "cluster")
    try:
        ids = [b.bookie_id for b in cluster.bookies]
        lost, ensemble = ids[0], ids[:3]  # ids[3] and ids[4] are the possible replacements
        with LedgerClient(uri, add_timeout_s=30) as client:
            swaps = SwapRecords(client.store)
            for r in range(ROUNDS):
                written = Written()
                ledgers = {step: write_ledger(client, ensemble, 10 * r + i, written) for i, step in enumerate(SWAP_STEPS)}
                kill_workers_at_each_step(uri, ledgers, lost)
                prepared = {}
                for step, lid in ledgers.items():
                    got = swaps.get(lid, 0, lost)
                    assert got is not None and got[0] is not None, f"step {step}: no swap record left"
                    prepared[step] = got[0].new
                    committed = lost not in client.ledger_metadata(lid).segments[0].bookies
                    assert committed == (step == STEP_COMMITTED), f"step {step}: committed={committed}"
                finish_with_another_worker(client, list(ledgers.values()), lost)
                for step, lid in ledgers.items():
                    bookies = client.ledger_metadata(lid).segments[0].bookies
                    assert bookies[0] == prepared[step], f"step {step}: finished with {bookies[0]}, prepared {prepared[step]}"
                assert client.store.children(REPLICA_SWAPS) == []
                check_every_copy(client, written)
            # A record naming a replacement that is gone: rolled back, another bookie chosen.
            written = Written()
            lid = write_ledger(client, ensemble, 99, written)
            swaps.prepare(new_record(lid, 0, lost, "127.0.0.1:1", "a dead worker"), None)
            moved = rereplicate(client.context, lid, lost, b"", resume_swaps=True)
            assert [i for i, _ in moved] == [0] and moved[0][1] in ids[3:]
            assert swaps.get(lid, 0, lost) is None
            check_every_copy(client, written)
    finally:
        cluster.close()
