"""An over-replicated copy is collected after its grace period, and the ledger still reads back
from its ensemble (issue 31, item 6; BookKeeper's BOOKKEEPER-895). Four real `bookie` processes
and a real ZooKeeper: a CLOSED ledger on bookies 0, 1, 2 is re-replicated off bookie 2 (which
stays up, as when autorecovery replaced a bookie that came back) onto bookie 3; bookie 2's GC
deletes its copy once the grace period has passed since the replacement, not before."""

from __future__ import annotations

import time
from pathlib import Path

from bookie.status import Status
from pyspark_ledger.autorecovery.rereplication import rereplicate
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.local_cluster import LocalCluster

GRACE_S = 3.0
WAIT_S = 120.0  # generous: a shared 2-core machine
ENTRIES = 20


def test_an_over_replicated_copy_goes_after_its_grace_and_the_ledger_reads_back(zk_uri: str, tmp_path: Path) -> None:
    args = ["--gc-interval-s", "1", "--gc-over-replicated-grace-s", str(GRACE_S)]
    with LocalCluster(4, metadata_uri=zk_uri, work_dir=tmp_path / "cluster", bookie_args=args) as cluster, \
            LedgerClient(cluster.metadata_uri) as client:
        b0, b1, b2, b3 = (b.bookie_id for b in cluster.bookies)
        payloads = [b"over-replicated-%d-" % i * 50 for i in range(ENTRIES)]
        writer = client.create_ledger(3, 3, 3, ensemble=[b0, b1, b2])
        for p in payloads:
            writer.add_entry(p)
        writer.close()
        lid = writer.ledger_id
        key = (lid.scope_id, lid.id)

        assert rereplicate(client.context, lid, b2, b"") == [(0, b3)]
        moved = time.monotonic()
        assert client.ledger_metadata(lid).bookies() == {b0, b1, b3}

        deadline = moved + WAIT_S
        while client.pool.get(b2).read(key, 0, 0).status == Status.OK and time.monotonic() < deadline:
            time.sleep(0.2)
        seconds = time.monotonic() - moved
        print(f"over-replicated copy collected seconds={seconds:.1f} grace_s={GRACE_S}")
        assert client.pool.get(b2).read(key, 0, 0).status == Status.NO_SUCH_LEDGER, f"still there after {seconds:.0f} s"
        assert seconds >= GRACE_S

        got = [e.payload for e in client.open_ledger(lid).read_entries(0, ENTRIES - 1)]
        assert got == payloads
        for b in (b0, b1, b3):  # every bookie of the ensemble keeps its copy
            resp = client.pool.get(b).read(key, 0, ENTRIES - 1)
            assert resp.status == Status.OK and len(resp.entries) == ENTRIES, b
            assert all(bytes(e).endswith(p) for e, p in zip(resp.entries, payloads)), b  # header, then payload
