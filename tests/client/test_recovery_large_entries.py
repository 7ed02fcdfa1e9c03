"""Recovery of a ledger whose writer died with large entries in flight (issue 17's liveness bug).

Pipelined adds carry the LAC known when they were sent, so a writer that dies right after a
burst of adds leaves bookies whose LAC is far behind the entries they hold. Recovery then reads
forward over MiB-sized entries; each bookie stops its answer at its byte limit (4 MiB by
default). The old recovery took such a short answer for "cannot decide" and asked the same
window again until it gave up, leaving the ledger IN_RECOVERY forever."""

from __future__ import annotations

import hashlib

import pytest

from metadata import LedgerState
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.local_cluster import LocalCluster


@pytest.mark.parametrize("count,size", [(14, 2**20), (600, 10_000)], ids=["14x1MiB", "600x10KB"])
def test_recovery_reads_past_byte_capped_answers(cluster3: LocalCluster, count: int, size: int) -> None:
    payloads = [hashlib.sha256(str(i).encode()).digest() * (size // 32) for i in range(count)]
    # No explicit LAC: the bookies only know the LAC the entries carried, as after a crash.
    writer_client = LedgerClient(cluster3.metadata_uri, explicit_lac_interval_ms=0)
    w = writer_client.create_ledger(3, 3, 2)
    futures = [w.add_entry_async(p) for p in payloads]
    assert [f.result(timeout=60) for f in futures] == list(range(count))
    ledger = w.ledger_id
    writer_client.close()  # the writer goes away without sealing the ledger

    with LedgerClient(cluster3.metadata_uri) as reader_client:
        bookie_lac = reader_client.open_ledger(ledger).last_add_confirmed()
        assert bookie_lac < count - 1, "the test needs entries past the bookies' LAC"
        handle = reader_client.open_ledger(ledger, recovery=True)
        meta = handle.metadata
        assert meta.state is LedgerState.CLOSED
        assert meta.last_entry_id == count - 1
        assert meta.length_bytes == sum(map(len, payloads))
        got = [e.payload for e in handle.read_entries(0, count - 1)]
        assert got == payloads


def test_a_long_read_of_large_entries_with_a_replica_down(cluster3: LocalCluster) -> None:
    """Each surviving replica answers a long range read with a byte-capped prefix while the dead
    one fails every entry it holds: the part past a short answer was not reached, not unreadable
    (the read used to give up on 'entry 18 unreadable from its write set')."""
    count = 40
    payloads = [hashlib.sha256(str(i).encode()).digest() * (2**20 // 32) for i in range(count)]
    with LedgerClient(cluster3.metadata_uri) as writer_client:
        w = writer_client.create_ledger(3, 3, 2)
        for f in [w.add_entry_async(p) for p in payloads]:
            f.result(timeout=60)
        first_replica = w.metadata.segments[0].bookies[0]  # replica 0 of entries 0, 3, 6, ...
        w.close()
    next(b for b in cluster3.bookies if b.bookie_id == first_replica).kill()
    with LedgerClient(cluster3.metadata_uri, rpc_timeout_s=5) as reader_client:
        handle = reader_client.open_ledger(w.ledger_id)
        got = [e.payload for e in handle.read_entries(0, count - 1)]
    assert got == payloads
