"""Run reads over read connections (bookie/read_connection.py, transport/read_connections.py):
the same answers as over gRPC from a real bookie, a clear error for a truncated or malformed
answer, gRPC for a bookie that does not offer them, failover when a bookie dies during a read,
and TLS with the bookie's read authorization."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bookie.add_listener import AddListener
from bookie.proto import bookie_pb2 as pb
from bookie.proto.add_framing import FRAME_HEADER, HELLO_BYTES, READ_MAGIC, FrameReader, hello, recv_exactly
from bookie.proto.versions import OUR_RANGE
from bookie.status import Status
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.datasource.options.source_options import parse_options
from pyspark_ledger.datasource.read.planning import LedgerRange, plan_ranges
from pyspark_ledger.errors import BookieRefusedError, BookieUnavailableError
from pyspark_ledger.ledger.keys import resolve_keys
from pyspark_ledger.ledger.run_reads import RunReads
from pyspark_ledger.testing.local_cluster import LocalBookie, LocalCluster
from pyspark_ledger.transport import read_connections
from pyspark_ledger.transport.bookie_client import BookieClient
from pyspark_ledger.transport.read_connections import READ_CONNECTIONS_ENV, ReadConnections
from pyspark_ledger.transport.run_response import RunResponse
from tests.bookie.server_helpers import add_sync

LEDGER = (0, 21)
WAIT_S = 60.0


def listener_address(bookie: LocalBookie) -> str:
    from tests.bookie.test_add_listener import registered_add_address
    return registered_add_address(bookie)


def only_range(client: LedgerClient, name: str, password: str = "") -> LedgerRange:
    (rng,) = plan_ranges(client, parse_options({"metadataServiceUri": client.metadata_uri, "log": name,
                                                 "password": password}))
    return rng


def answer_of(resp: RunResponse) -> tuple[Any, ...]:
    runs = [(r.first_entry_id, list(r.lengths), bytes(r.data)) for r in resp.runs]
    return resp.status, resp.lac, list(resp.entry_ids), list(resp.entry_status), runs


@pytest.fixture(scope="module")
def bookie(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBookie]:
    d = tmp_path_factory.mktemp("read-connections")
    b = LocalBookie(f"sqlite://{d / 'meta.db'}", d / "data", extra_args=["--no-verify-ledger-keys"]).start()
    # Small entries of mixed sizes (cut pieces) and entries of 6000 bytes (views of the pread).
    entries = [(i, i - 1, (f"entry {i} ".encode() * (1 + i % 7)) if i < 300 else bytes([i % 251]) * 6000)
               for i in range(400)]
    with BookieClient(b.bookie_id, b.address) as c:
        assert add_sync(c, LEDGER, entries) == (Status.OK, "")
    yield b
    b.stop()


def test_run_reads_go_over_a_read_connection_with_the_grpc_answer(
        bookie: LocalBookie, monkeypatch: pytest.MonkeyPatch) -> None:
    address = listener_address(bookie)
    with BookieClient(bookie.bookie_id, bookie.address, add_address=address) as ours:
        monkeypatch.setenv(READ_CONNECTIONS_ENV, "0")
        with BookieClient(bookie.bookie_id, bookie.address, add_address=address) as grpc_only:
            for first, last, max_bytes in ((0, 409, 0), (0, 399, 50_000), (250, 320, 0), (500, 510, 0)):
                got = ours.read_runs(LEDGER, first, last, max_entries=1000, max_bytes=max_bytes)
                want = grpc_only.read_runs(LEDGER, first, last, max_entries=1000, max_bytes=max_bytes)
                assert answer_of(got) == answer_of(want)
            assert grpc_only.read_connections() == 0
        assert ours.read_connections() == 1  # one connection, kept and reused for every read
        whole = ours.read_runs(LEDGER, 0, 409, max_entries=1000)
        assert [r.first_entry_id for r in whole.runs] == [0] and len(whole.runs[0].lengths) == 400
        assert list(whole.entry_ids) == list(range(400, 410))
        bad = ours.read_runs(LEDGER, 5, 4)  # answered by the bookie, over the connection
        assert bad.status == Status.INVALID_REQUEST and not bad.runs


def test_a_bookie_without_read_connections_is_read_over_grpc(bookie: LocalBookie) -> None:
    # An add listener that serves no reads refuses the read hello, as a bookie of an earlier release does.
    listener = AddListener(handler=None, host="127.0.0.1", port=0).start()  # type: ignore[arg-type]  # no adds here
    try:
        with BookieClient(bookie.bookie_id, bookie.address, add_address=f"127.0.0.1:{listener.port}") as c:
            for _ in range(3):
                resp = c.read_runs(LEDGER, 0, 9)
                assert resp.status == Status.OK and len(resp.runs[0].lengths) == 10
            assert c.read_connections() == 0
    finally:
        listener.close()
    # No add listener at all: gRPC, without trying.
    with BookieClient(bookie.bookie_id, bookie.address) as c:
        assert c.read_runs(LEDGER, 0, 9).status == Status.OK and c.read_connections() == 0


@contextlib.contextmanager
def fake_bookie(answer: bytes) -> Iterator[str]:
    """A listener that accepts one read connection, takes one request and sends `answer` raw
    (then closes): a bookie that breaks the framing."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.settimeout(WAIT_S)
            asked = recv_exactly(conn, HELLO_BYTES)
            assert asked == hello(OUR_RANGE.high, READ_MAGIC)
            conn.sendall(asked)
            assert FrameReader(conn).read() is not None  # the request
            conn.sendall(answer)
            conn.shutdown(socket.SHUT_WR)
            recv_exactly(conn, 1)  # until the client closes

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        t.join(WAIT_S)
        server.close()
        assert not t.is_alive()


def frame_of(body: bytes) -> bytes:
    return FRAME_HEADER.pack(len(body)) + body


@pytest.mark.parametrize(("answer", "problem"), [
    (b"", "the connection ended before the answer"),
    (b"\x00\x00", r"ended inside an answer's header \(2 of 4 bytes\)"),
    (FRAME_HEADER.pack(100) + b"x" * 10, r"ended inside an answer \(10 of 100 bytes\)"),
    (FRAME_HEADER.pack(2**31), "exceeds the frame limit"),
    (frame_of(b"\x0a\xff\xff\xff\xff\x0f"), "a malformed answer of 6 bytes"),
], ids=["nothing", "half a header", "truncated body", "over the limit", "not a ReadResponse"])
def test_a_truncated_or_malformed_answer_fails_the_read_by_name(answer: bytes, problem: str) -> None:
    with fake_bookie(answer) as address:
        conns = ReadConnections("fake", lambda: address, None)
        request = pb.ReadRequest(first_entry_id=0, last_entry_id=1, entry_runs=True).SerializeToString()
        with pytest.raises(BookieUnavailableError, match=problem):
            conns.read(request, 10.0)
        assert conns.connections() == 0  # the broken connection is gone
        conns.close()


def test_reads_fail_over_when_a_bookie_dies_during_a_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with LocalCluster(3, work_dir=tmp_path / "cluster") as cluster, LedgerClient(cluster.metadata_uri) as client:
        payloads = [f"entry-{i:05d}".encode() * 20 for i in range(600)]
        with client.open_log_writer("dies", batching=False) as w:
            futures = [w.append_async(p) for p in payloads]
            futures[-1].result(WAIT_S)
        rng = only_range(client, "dies")
        meta = rng.metadata
        ensemble = meta.ensemble_for(0)
        victim = next(b for b in cluster.bookies if b.bookie_id == ensemble[1])
        exchange = read_connections.exchange
        killed: list[str] = []

        def dies_first(sock: socket.socket, request: bytes, timeout_s: float) -> RunResponse:
            if not killed:  # the first read (to ensemble[1]) has its connection open: the bookie dies now
                victim.kill()
                killed.append(victim.bookie_id)
            return exchange(sock, request, timeout_s)

        monkeypatch.setattr(read_connections, "exchange", dies_first)
        reads = RunReads(client.context, meta, rng.metadata_version, b"", views=False, first_replica=1)
        try:
            got = [p for w, (lo, hi) in enumerate(((0, 299), (300, 599))) for run in reads.read(w, lo, hi)
                   for p in run.payloads.to_pylist()]
        finally:
            reads.close()
        assert killed == [ensemble[1]] and got == payloads
        assert reads.replica == 2  # later windows start after the replica that failed


def test_tls_read_connections_keep_the_bookies_read_authorization(tmp_path: Path) -> None:
    cluster = LocalCluster(1, work_dir=tmp_path / "cluster", tls=True, bookie_args=["--require-read-auth"])
    with cluster.start(), LedgerClient(cluster.metadata_uri, **cluster.client_tls) as client:  # type: ignore[arg-type]  # client_tls: the three tls_* paths, as strings
        with client.open_log_writer("secret", batching=False, ensemble_size=1, write_quorum_size=1,
                                    ack_quorum_size=1, password=b"pw") as w:
            w.append_async(b"x" * 5000).result(WAIT_S)
        meta = only_range(client, "secret", "pw").metadata
        bc = client.pool.get(meta.ensemble_for(0)[0])
        key = (meta.ledger_id.scope_id, meta.ledger_id.id)
        master_key = resolve_keys(meta, b"pw").master_key
        resp = bc.read_runs(key, 0, 0, master_key=master_key)
        assert resp.status == Status.OK and bytes(resp.runs[0].data).endswith(b"x" * 5000)
        assert bc.read_connections() == 1 and bc.read_connections_encrypted()
        # A wrong key: refused over the connection, asked again over gRPC, refused there by name.
        with pytest.raises(BookieRefusedError, match="PERMISSION_DENIED"):
            bc.read_runs(key, 0, 0, master_key=b"wrong")


def test_a_hosts_read_connections_are_bounded_apart_from_its_add_connections() -> None:
    from tests.bookie.test_add_listener import _AcceptEverything, _one_add, connect_and_greet

    def ok(request: pb.ReadRequest, identity: str | None) -> list[bytes | memoryview]:
        return [pb.ReadResponse(status=int(Status.OK), lac=7).SerializeToString()]

    listener = AddListener(_AcceptEverything(), "127.0.0.1", 0, per_peer_max=2, reads=ok).start()  # type: ignore[arg-type]  # a stand-in handler
    address = f"127.0.0.1:{listener.port}"
    request = pb.ReadRequest(first_entry_id=0, last_entry_id=0, entry_runs=True).SerializeToString()
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(listener.close, timeout_s=WAIT_S)
        writer = cleanup.enter_context(connect_and_greet(address))  # one of the host's 2 add slots
        readers = [read_connections.open_read_connection(address, None) for _ in range(2)]
        for sock in readers:
            cleanup.callback(sock.close)
            assert read_connections.exchange(sock, request, WAIT_S).lac == 7
        with pytest.raises(read_connections.NotOffered):  # a third: past the host's 2 read slots
            read_connections.open_read_connection(address, None)
        # The readers hold read slots only: the host still has its second add slot.
        second_writer = cleanup.enter_context(connect_and_greet(address))
        assert _one_add(writer, 1) == [(1, Status.OK)] and _one_add(second_writer, 2) == [(2, Status.OK)]
