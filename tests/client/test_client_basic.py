"""The ledger client against real bookies, on ZooKeeper and on the embedded store."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bookie.status import Status
from metadata import CloseContext, LedgerId, LedgerState, NoSuchLedgerError
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.errors import BadPasswordError, LedgerFencedError, ReadError
from pyspark_ledger.testing.local_cluster import LocalCluster


def test_round_trip_and_id_forms(client: LedgerClient) -> None:
    with client.create_ledger(3, 3, 2) as w:
        ids = [w.add_entry(f"e{i}".encode()) for i in range(50)]
        assert ids == list(range(50))
        futs = [w.add_entry_async(b"x" * 1000) for _ in range(500)]
        assert [f.result(timeout=30) for f in futs] == list(range(50, 550))
        lid = w.ledger_id
        w.close(CloseContext.builder().because_no_more_data().build())
    meta = client.ledger_metadata(lid)
    assert meta.state is LedgerState.CLOSED and meta.last_entry_id == 549
    assert meta.length_bytes == sum(len(f"e{i}") for i in range(50)) + 500 * 1000
    for form in (lid.id, (0, lid.id), lid, lid.qualified_name):
        with client.open_ledger(form) as r:
            assert r.last_add_confirmed() == 549
            entries = list(r.read_entries(0, 549))
            assert [e.entry_id for e in entries] == list(range(550))
            assert entries[7].payload == b"e7" and entries[100].payload == b"x" * 1000
    assert lid in set(client.list_ledgers())
    client.delete_ledger(lid)
    with pytest.raises(NoSuchLedgerError):
        client.open_ledger(lid)
    assert lid not in set(client.list_ledgers())


def test_scoped_ids(client: LedgerClient) -> None:
    w = client.create_ledger(3, 2, 2, scope_id=None)
    assert w.ledger_id.scope_id != 0
    w.add_entry(b"uuid-scoped")
    w.close()
    r = client.open_ledger(w.ledger_id.qualified_name)
    assert r.read_entry(0).payload == b"uuid-scoped"
    assert w.ledger_id in set(client.list_ledgers(scope_id=w.ledger_id.scope_id))


def test_striping_e4_w3(make_cluster: Callable[..., LocalCluster]) -> None:
    cluster = make_cluster(4)
    with LedgerClient(cluster.metadata_uri) as client:
        w = client.create_ledger(4, 3, 2)
        for i in range(40):
            w.add_entry(b"stripe %d" % i)
        w.close()
        ensemble = client.ledger_metadata(w.ledger_id).segments[0].bookies
        key = (0, w.ledger_id.id)
        for idx, bookie in enumerate(ensemble):
            resp = client.pool.get(bookie).read(key, 0, 39)
            holds = {eid for eid, st in zip(resp.entry_ids, resp.entry_status) if st == Status.OK}
            expected = {e for e in range(40) if idx in {e % 4, (e + 1) % 4, (e + 2) % 4}}
            assert holds == expected, f"bookie index {idx} holds the wrong entries"


def test_reads_never_pass_the_lac_or_the_last_entry(client: LedgerClient) -> None:
    w = client.create_ledger(3, 3, 2)
    for i in range(10):
        w.add_entry(b"%d" % i)
    r = client.open_ledger(w.ledger_id)
    lac = r.last_add_confirmed()
    assert 8 <= lac <= 9  # the last entry's LAC may ride only on an explicit LAC
    with pytest.raises(ReadError, match="last add confirmed"):
        list(r.read_entries(0, 10))
    w.close()
    r2 = client.open_ledger(w.ledger_id)
    with pytest.raises(ReadError, match="last entry is 9"):
        list(r2.read_entries(5, 10))


def test_mac_digest_and_wrong_password(client: LedgerClient) -> None:
    w = client.create_ledger(3, 3, 2, digest_type="mac", password=b"right")
    w.add_entry(b"secret data")
    w.close()
    with pytest.raises(BadPasswordError, match="wrong password"):
        client.open_ledger(w.ledger_id, password=b"wrong")
    with pytest.raises(BadPasswordError):
        client.open_ledger(w.ledger_id, recovery=True, password=b"wrong")
    assert client.open_ledger(w.ledger_id, password=b"right").read_entry(0).payload == b"secret data"


def test_corrupt_replica_is_read_from_another(client: LedgerClient) -> None:
    w = client.create_ledger(3, 3, 2)
    w.add_entry(b"good")
    w.close()
    meta = client.ledger_metadata(w.ledger_id)
    first = meta.segments[0].bookies[0]  # the replica a reader tries first for entry 0
    key = (0, w.ledger_id.id)
    from pyspark_ledger.protocol.digest import Digest, master_key
    from pyspark_ledger.protocol.entry_format import encode_entry

    forged = bytearray(encode_entry(Digest.for_ledger("crc32c"), 0, key[1], 0, -1, 4, b"good"))
    forged[-1] ^= 0xFF  # right header, payload damaged after the digest was computed
    done: list[Status] = []
    import threading

    ev = threading.Event()
    client.pool.get(first).add_batch(key, master_key(b""), [(0, -1, bytes(forged))],
                                     lambda s, m: (done.append(s), ev.set()), recovery=True)
    assert ev.wait(10) and done == [Status.OK]
    assert client.open_ledger(w.ledger_id).read_entry(0).payload == b"good"


def test_fenced_writer_gets_no_more_acks(client: LedgerClient) -> None:
    w = client.create_ledger(3, 3, 2)
    for i in range(5):
        w.add_entry(b"before %d" % i)
    r = client.open_ledger(w.ledger_id, recovery=True)
    assert r.metadata.state is LedgerState.CLOSED and r.metadata.last_entry_id == 4
    with pytest.raises(LedgerFencedError):
        w.add_entry(b"after the fence", timeout_s=20)
    with pytest.raises(LedgerFencedError):
        w.add_entry_async(b"later")
    assert client.ledger_metadata(w.ledger_id).last_entry_id == 4
    with pytest.raises(LedgerFencedError):
        w.close()
    with pytest.raises(LedgerFencedError):  # a failed close stays failed when asked again
        w.close()


def test_fenced_writer_close_checks_the_metadata(client: LedgerClient) -> None:
    """A writer that never noticed the fence (no add after it) still learns it on close: the
    ledger was closed by recovery at a different entry, so close() must not report success."""
    w = client.create_ledger(3, 3, 2)
    w.add_entry(b"acknowledged")
    w.add_entry_async(b"in flight when recovery runs")
    r = client.open_ledger(w.ledger_id, recovery=True)
    end = r.metadata.last_entry_id
    if end == w.last_add_confirmed():
        w.close()  # recovery closed exactly where the writer would have: that is a success
    else:
        with pytest.raises(LedgerFencedError):
            w.close()
        with pytest.raises(LedgerFencedError):
            w.close()
    assert client.ledger_metadata(w.ledger_id).last_entry_id == end


def test_concurrent_recovery_agrees(client: LedgerClient, cluster3: LocalCluster) -> None:
    import concurrent.futures

    w = client.create_ledger(3, 3, 2)
    for i in range(200):
        w.add_entry_async(b"r%d" % i)
    w.add_entry(b"last")
    acked = w.last_add_confirmed()
    w._close_quietly()  # the writer "dies" without closing
    clients = [LedgerClient(cluster3.metadata_uri) for _ in range(2)]
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as ex:
            results = list(ex.map(lambda c: c.open_ledger(w.ledger_id, recovery=True).metadata.last_entry_id, clients))
        assert results[0] == results[1] >= acked
    finally:
        for c in clients:
            c.close()


def test_ledger_ids_reject_garbage(client: LedgerClient) -> None:
    from metadata import InvalidMetadataError

    with pytest.raises(InvalidMetadataError):
        client.open_ledger("not-an-id")
    with pytest.raises(NoSuchLedgerError):
        client.open_ledger(LedgerId(5, 5))
