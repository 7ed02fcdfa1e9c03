"""`bookie --autorecovery`: every bookie runs the autorecovery service as its child; a bookie
killed -9 is re-replicated by the others' services, the dead bookie's own service ends with it
(its stdin pipe closes), and a graceful stop of a bookie stops its service too."""

from __future__ import annotations

import time
from pathlib import Path

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.local_cluster import LocalCluster
from tests.autorecovery.cluster_shape import check_every_copy, wait_fully_replicated, write_ledgers, zk_uri_with_short_sessions


def children_of(pid: int) -> set[int]:
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        out |= {int(p) for p in text}
    return out


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[1].startswith("Z")  # a zombie has exited
    except FileNotFoundError:
        return True


def wait_gone(pids: set[int], timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(gone(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def test_bookies_with_autorecovery_repair_a_killed_peer(zk_uri: str, tmp_path: Path) -> None:
    uri = zk_uri_with_short_sessions(zk_uri)
    cluster = LocalCluster(4, metadata_uri=uri, work_dir=tmp_path / "cluster",
                           bookie_args=["--autorecovery", "--lost-bookie-grace-s", "3"]).start()
    try:
        written = write_ledgers(uri, 24, mib_every=12, open_every=1000)
        services = {b.bookie_id: children_of(b.proc.pid) for b in cluster.bookies}
        assert all(len(pids) == 1 for pids in services.values()), services
        victim = cluster.bookies[0]
        victim.kill()
        assert wait_gone(services[victim.bookie_id]), "the killed bookie's autorecovery kept running"
        with LedgerClient(uri, add_timeout_s=30) as client:
            wait_fully_replicated(client, written, {victim.bookie_id}, timeout_s=90)
            check_every_copy(client, written)
        survivor = cluster.bookies[1]
        assert survivor.stop() == 0
        assert wait_gone(services[survivor.bookie_id], timeout_s=1), "a stopped bookie left its autorecovery running"
    finally:
        cluster.close()
