"""GC trusts the metadata it is pointed at: a bookie whose --metadata-uri names another cluster
(or an empty root) would find every ledger "absent" and delete all of them. The guard is the
cookie check at start (bookie/cookie.py), which runs before storage or GC: such a bookie
refuses to start, names the problem, and changes no byte of its data dir (issue 18, "never
delete a ledger that metadata still has"). Real `bookie` processes, a real ZooKeeper."""

from __future__ import annotations

import hashlib
from pathlib import Path

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.local_cluster import LocalBookie, LocalCluster
from pyspark_ledger.testing.zookeeper_server import LocalZooKeeper

GC_ON = ["--gc-interval-s", "1"]


def data_dir_digest(bookie: LocalBookie) -> dict[str, str]:
    return {str(p.relative_to(bookie.data_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(bookie.data_dir.rglob("*")) if p.is_file()}


def refused_start(bookie: LocalBookie, metadata_uri: str) -> str:
    stray = LocalBookie(metadata_uri, bookie.data_dir, port=bookie.port, bookie_id=bookie.bookie_id,
                        extra_args=GC_ON, log_path=bookie.data_dir.parent / "refused.log")
    code, log = stray.run_to_exit()
    assert code != 0, f"the bookie started against {metadata_uri}:\n{log}"
    return log


def test_a_bookie_pointed_at_other_metadata_refuses_to_start_and_deletes_nothing(
        zk_server: LocalZooKeeper, zk_uri: str, tmp_path: Path) -> None:
    payloads = [b"entry-%d-" % i * 100 for i in range(20)]
    with LocalCluster(3, metadata_uri=zk_uri, work_dir=tmp_path / "cluster", bookie_args=GC_ON) as cluster:
        with LedgerClient(cluster.metadata_uri) as client:
            writer = client.create_ledger(3, 3, 3)  # A=3: every entry is on the guarded bookie
            for p in payloads:
                writer.add_entry(p)
            writer.close()
            lid = writer.ledger_id
        bookie = cluster.bookies[0]
        bookie.stop()
        before = data_dir_digest(bookie)
        assert any(name.startswith("entries/") for name in before), before

        # An empty root of the same ZooKeeper: a different (or wiped) cluster.
        log = refused_start(bookie, zk_server.uri(f"/other-{tmp_path.name}"))
        assert "has none" in log and "--metadata-uri" in log, log
        assert data_dir_digest(bookie) == before

        # The operator removed the COOKIE to "adopt" the data dir: still refused, nothing deleted.
        (bookie.data_dir / "COOKIE").rename(tmp_path / "COOKIE.saved")
        log = refused_start(bookie, zk_server.uri(f"/other2-{tmp_path.name}"))
        assert "has no cookie" in log, log
        (tmp_path / "COOKIE.saved").rename(bookie.data_dir / "COOKIE")
        assert data_dir_digest(bookie) == before

        # Back at its own cluster, with GC on: it serves every entry.
        bookie.start()
        with LedgerClient(cluster.metadata_uri) as client:
            reader = client.open_ledger(lid)
            assert [e.payload for e in reader.read_entries(0, len(payloads) - 1)] == payloads
            for other in cluster.bookies[1:]:
                other.stop()
            got = [e.payload for e in client.open_ledger(lid).read_entries(0, len(payloads) - 1)]
            assert got == payloads  # from the guarded bookie alone
