"""The ledger client picks its add transport from each bookie's registration: plain TCP where a
bookie advertises an add listener, gRPC where it does not; and it finds a restarted bookie's new
add port. Real `bookie` processes on loopback, embedded (SQLite) metadata."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from bookie.status import Status
from metadata import BookieInfo
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.local_cluster import LocalBookie, LocalCluster
from pyspark_ledger.transport.add_streams import GrpcAddStream, SocketAddStream

WAIT_S = 20.0


def registrations(client: LedgerClient, cluster: LocalCluster) -> dict[str, BookieInfo]:
    out = {}
    for b in cluster.bookies:
        info = client.registry.get(b.bookie_id)
        assert info is not None, f"bookie {b.bookie_id} is not registered"
        out[b.bookie_id] = info
    return out


def wait_registered(client: LedgerClient, bookie: LocalBookie) -> BookieInfo:
    """A (re)started bookie's registration: it registers just after it starts serving."""
    deadline = time.monotonic() + WAIT_S
    while (info := client.registry.get(bookie.bookie_id)) is None:
        assert time.monotonic() < deadline, f"bookie {bookie.bookie_id} never registered"
        time.sleep(0.05)
    return info


def write_and_read_back(client: LedgerClient, ensemble: list[str], count: int, tag: bytes) -> None:
    """A ledger on exactly `ensemble` (E = W = 3): `count` entries, every one acknowledged, read
    back, and stored on every one of the three bookies."""
    w = client.create_ledger(3, 3, 2, ensemble=ensemble)
    futures = [w.add_entry_async(tag + b"-%d" % i) for i in range(count)]
    assert [f.result(timeout=WAIT_S) for f in futures] == list(range(count))
    w.close()
    with client.open_ledger(w.ledger_id) as r:
        assert [e.payload for e in r.read_entries(0, count - 1)] == [tag + b"-%d" % i for i in range(count)]
    # Nothing went wrong on the way: no ensemble change, the bookies are the ones we asked for...
    assert [list(s.bookies) for s in client.ledger_metadata(w.ledger_id).segments] == [ensemble]
    # ...and each got every entry (the third ack of the last entries may land just after close).
    key = (w.ledger_id.scope_id, w.ledger_id.id)
    for bid in ensemble:
        deadline = time.monotonic() + WAIT_S
        while True:
            resp = client.pool.get(bid).read(key, 0, count - 1)
            held = [eid for eid, st in zip(resp.entry_ids, resp.entry_status) if st == Status.OK]
            if held == list(range(count)):
                break
            assert time.monotonic() < deadline, f"bookie {bid} holds {len(held)} of {count} entries"
            time.sleep(0.05)


def test_bookies_without_an_add_listener_take_adds_over_grpc(sqlite_uri: str, tmp_path: Path) -> None:
    with LocalCluster(3, metadata_uri=sqlite_uri, work_dir=tmp_path / "cluster",
                      bookie_args=["--add-port", "-1"]) as cluster, \
            LedgerClient(cluster.metadata_uri, add_timeout_s=5) as client:
        ids = [b.bookie_id for b in cluster.bookies]
        assert [info.add_address for info in registrations(client, cluster).values()] == ["", "", ""]
        write_and_read_back(client, ids, 200, b"grpc")
        for bid in ids:
            assert isinstance(client.pool.get(bid)._stream, GrpcAddStream), bid


def test_adds_go_over_tcp_and_find_a_restarted_bookies_new_add_port(sqlite_uri: str, tmp_path: Path) -> None:
    with LocalCluster(3, metadata_uri=sqlite_uri, work_dir=tmp_path / "cluster") as cluster, \
            LedgerClient(cluster.metadata_uri, add_timeout_s=5) as client:
        ids = [b.bookie_id for b in cluster.bookies]
        before = registrations(client, cluster)
        for info in before.values():
            assert info.add_address.startswith("127.0.0.1:") and info.add_address != info.address
        write_and_read_back(client, ids, 200, b"before")
        streams = {bid: client.pool.get(bid)._stream for bid in ids}
        for bid, stream in streams.items():
            assert isinstance(stream, SocketAddStream), bid
            assert stream.address == before[bid].add_address and not stream.dead

        # Restart bookie 0 while no ledger is being written. Its old add port stays taken (by a
        # socket that accepts but never answers), so it must come back on another one, and a
        # client still using the old address would fail its adds.
        restarted = cluster.bookies[0]
        old_port = int(before[restarted.bookie_id].add_address.rpartition(":")[2])
        restarted.stop()
        with socket.socket() as squatter:
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past the old TIME_WAITs
            squatter.bind(("127.0.0.1", old_port))
            squatter.listen()
            restarted.start()
            after = wait_registered(client, restarted)
            assert after.add_address.startswith("127.0.0.1:") and after.add_address != before[restarted.bookie_id].add_address

            # The stop hung up the client's connection: that stream is dead (no add was pending).
            old = streams[restarted.bookie_id]
            deadline = time.monotonic() + WAIT_S
            while not old.dead:
                assert time.monotonic() < deadline, "the client never noticed the bookie hang up"
                time.sleep(0.01)

            write_and_read_back(client, ids, 200, b"after")
            new = client.pool.get(restarted.bookie_id)._stream
            assert isinstance(new, SocketAddStream) and new is not old
            assert new.address == after.add_address  # looked up again in the registration
            # The other two bookies kept their connections.
            for bid in ids[1:]:
                assert client.pool.get(bid)._stream is streams[bid]
