"""The bookie's plain-TCP add listener (bookie.add_listener), spoken to with raw sockets: one
answer per request, in order; a peer that breaks the framing loses its connection (and the bookie
says why) while everyone else carries on; a connection limit. Real `bookie` processes on
loopback, plus one in-process listener for the connection limit."""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bookie.add_handler import AddOutcome
from bookie.add_listener import AddListener
from bookie.proto import bookie_pb2 as pb
from bookie.proto.add_framing import FRAME_BYTES_MAX, HELLO_BYTES, MAGIC, frame, hello, recv_exactly
from bookie.proto.versions import WIRE_VERSION_MAX, WIRE_VERSION_MIN
from bookie.status import Status
from metadata import BookieRegistry, open_store
from pyspark_ledger.testing.local_cluster import LocalBookie
from pyspark_ledger.transport.bookie_client import BookieClient
from tests.bookie.server_helpers import KEY, check_mixed_answers, mixed_add_requests

WAIT_S = 20.0


# ---- raw-socket helpers -------------------------------------------------------------------------

def registered_add_address(bookie: LocalBookie) -> str:
    """The add listener's host:port from the bookie's registration (waiting, bounded, for it)."""
    store = open_store(bookie.metadata_uri)
    try:
        deadline = time.monotonic() + WAIT_S
        while (info := BookieRegistry(store).get(bookie.bookie_id)) is None:
            assert time.monotonic() < deadline, "the bookie never registered"
            time.sleep(0.05)
        return info.add_address
    finally:
        store.close()


def connect(address: str) -> socket.socket:
    host, _, port = address.rpartition(":")
    return socket.create_connection((host, int(port)), timeout=WAIT_S)


def recv_all(sock: socket.socket, n: int) -> bytes:
    data = recv_exactly(sock, n)
    assert len(data) == n, f"connection closed after {len(data)} of {n} bytes"
    return data


def connect_and_greet(address: str) -> socket.socket:
    sock = connect(address)
    sock.sendall(hello(WIRE_VERSION_MIN))  # the oldest version: what a client of release 0.1.0 asks for
    assert recv_all(sock, HELLO_BYTES) == hello(WIRE_VERSION_MIN)
    return sock


def read_response(sock: socket.socket) -> pb.AddResponse:
    (size,) = struct.unpack(">I", recv_all(sock, 4))
    return pb.AddResponse.FromString(recv_all(sock, size))


def until_closed(sock: socket.socket) -> bytes:
    """Everything the peer sends until it closes the connection (a reset counts as closed: the
    bookie may close with our bytes unread). Fails if it stays open for WAIT_S."""
    sock.settimeout(WAIT_S)
    out = b""
    try:
        while chunk := sock.recv(4096):
            out += chunk
    except ConnectionResetError:
        pass
    except TimeoutError:
        pytest.fail(f"the connection stayed open for {WAIT_S:g} s")
    return out


def wait_for_log(bookie: LocalBookie, text: str) -> str:
    """The first line of the bookie's log that contains `text` (bounded wait)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        for line in bookie.log_path.read_text(errors="replace").splitlines():
            if text in line:
                return line
        assert time.monotonic() < deadline, f"no log line with {text!r}:\n{bookie.tail_log()}"
        time.sleep(0.05)


def batch(request_id: int, ledger_id: int, entry_ids: list[int], lacs: list[int], entries: list[bytes],
          key: bytes = KEY) -> pb.AddBatch:
    return pb.AddBatch(request_id=request_id, ledger=pb.LedgerRef(ledger_id=ledger_id), master_key=key,
                       entry_ids=entry_ids, lacs=lacs, entries=entries)


def assert_adds_work(address: str, ledger_id: int) -> None:
    """A fresh connection gets an add acknowledged."""
    with connect_and_greet(address) as sock:
        sock.sendall(frame([pb.AddRequest(batches=[batch(1, ledger_id, [0], [-1], [b"ok"])]).SerializeToString()]))
        assert [(r.request_id, Status(r.status)) for r in read_response(sock).results] == [(1, Status.OK)]


@pytest.fixture(scope="module")
def shared_bookie(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBookie]:
    """One bookie for this module's tests (each uses its own ledgers and connections)."""
    d = tmp_path_factory.mktemp("add-listener")
    b = LocalBookie(f"sqlite://{d / 'meta.db'}", d / "data", extra_args=["--no-verify-ledger-keys"]).start()
    yield b
    b.stop()


@pytest.fixture(scope="module")
def add_address(shared_bookie: LocalBookie) -> str:
    address = registered_add_address(shared_bookie)
    assert address.startswith("127.0.0.1:") and address != shared_bookie.address
    return address


# ---- the protocol -------------------------------------------------------------------------------

def test_bookie_answers_each_request_once_with_every_batch_in_order(
        shared_bookie: LocalBookie, add_address: str) -> None:
    """Two requests sent back to back on one connection: a good batch, a malformed one (lacs
    missing), another good one and a wrong key, then one more good one. Two answers, in order,
    one result per batch in the request's order; the good entries are readable afterwards."""
    first, second = mixed_add_requests((101, 102, 103))
    with connect_and_greet(add_address) as sock:
        sock.sendall(frame([first.SerializeToString()]) + frame([second.SerializeToString()]))
        responses = [read_response(sock), read_response(sock)]
        # Exactly two answers: nothing more arrives before we close.
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(1)
    with BookieClient(shared_bookie.bookie_id, shared_bookie.address) as client:
        check_mixed_answers(responses, client, (101, 102, 103))


def test_an_idle_connection_stays_open_and_serves_later(add_address: str) -> None:
    with connect_and_greet(add_address) as sock:
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            sock.recv(1)  # nothing unasked for, and no hang-up
        sock.settimeout(WAIT_S)
        sock.sendall(frame([pb.AddRequest(batches=[batch(21, 201, [0], [-1], [b"late"])]).SerializeToString()]))
        assert [Status(r.status) for r in read_response(sock).results] == [Status.OK]


# ---- peers that break the protocol --------------------------------------------------------------

def test_a_bad_hello_closes_the_connection_and_the_bookie_keeps_serving(
        shared_bookie: LocalBookie, add_address: str) -> None:
    with connect(add_address) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\n")
        assert until_closed(sock) == b""  # not even the bookie's hello
    line = wait_for_log(shared_bookie, "reason=not an add-transport hello: b'GET / HT'")
    assert " WARNING " in line
    assert_adds_work(add_address, 301)


def test_a_frame_over_the_limit_closes_the_connection(shared_bookie: LocalBookie, add_address: str) -> None:
    with connect_and_greet(add_address) as sock:
        sock.sendall(struct.pack(">I", FRAME_BYTES_MAX + 1))  # and no body: the header alone is refused
        assert until_closed(sock) == b""
    line = wait_for_log(shared_bookie, f"reason=a frame of {FRAME_BYTES_MAX + 1} bytes exceeds the limit")
    assert " WARNING " in line
    assert_adds_work(add_address, 302)


def test_a_frame_that_is_not_an_add_request_closes_the_connection(
        shared_bookie: LocalBookie, add_address: str) -> None:
    with connect_and_greet(add_address) as sock:
        good = pb.AddRequest(batches=[batch(31, 303, [0], [-1], [b"before"])]).SerializeToString()
        sock.sendall(frame([good]))
        assert [Status(r.status) for r in read_response(sock).results] == [Status.OK]
        sock.sendall(frame([b"garbage!"]))
        assert until_closed(sock) == b""  # no answer to the garbage
    line = wait_for_log(shared_bookie, "reason=a frame of 8 bytes is not an AddRequest")
    assert " WARNING " in line
    assert_adds_work(add_address, 304)


def test_a_client_asking_for_a_version_the_bookie_lacks_gets_the_bookies_highest_and_is_closed(
        shared_bookie: LocalBookie, add_address: str) -> None:
    newer = WIRE_VERSION_MAX + 1
    with connect(add_address) as sock:
        sock.sendall(MAGIC + struct.pack(">I", newer))
        # The bookie's highest, so the client can fall back to it or say what it met.
        assert until_closed(sock) == hello(WIRE_VERSION_MAX)
    line = wait_for_log(shared_bookie, f"reason=client asks for wire version {newer}, this bookie speaks")
    assert " WARNING " in line
    assert_adds_work(add_address, 305)


def test_a_bookie_started_without_an_add_listener_advertises_none(tmp_path: Path) -> None:
    b = LocalBookie(f"sqlite://{tmp_path / 'meta.db'}", tmp_path / "data",
                    extra_args=["--add-port", "-1", "--no-verify-ledger-keys"]).start()
    try:
        assert registered_add_address(b) == ""
        assert "add_port=none" in wait_for_log(b, "bookie serving")
    finally:
        b.stop()


# ---- the connection limit, in-process -----------------------------------------------------------

class _AcceptEverything:
    """An AddHandler stand-in: every batch OK."""

    def handle(self, request: pb.AddRequest, run_bodies: object = ()) -> list[AddOutcome]:
        return [AddOutcome(b.request_id, Status.OK, "") for b in request.batches]


def _one_add(sock: socket.socket, request_id: int) -> list[tuple[int, Status]]:
    sock.sendall(frame([pb.AddRequest(batches=[batch(request_id, 1, [0], [-1], [b"x"])]).SerializeToString()]))
    return [(r.request_id, Status(r.status)) for r in read_response(sock).results]


def test_connections_past_the_limit_are_refused_at_accept(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="bookie.add_listener")
    listener = AddListener(_AcceptEverything(), "127.0.0.1", 0, connections_max=1).start()
    address = f"127.0.0.1:{listener.port}"
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(listener.close, timeout_s=WAIT_S)
        first = cleanup.enter_context(connect_and_greet(address))
        assert listener.connections() == 1
        # A second connection while the first is open: closed at once, before any hello.
        with connect(address) as second:
            assert until_closed(second) == b""
        refused = [r for r in caplog.records if "reason=at the limit of 1 connections" in r.getMessage()]
        assert [r.levelno for r in refused] == [logging.WARNING]
        assert _one_add(first, 7) == [(7, Status.OK)]  # the first is untouched
        # Once the first goes away there is room again.
        first.close()
        deadline = time.monotonic() + WAIT_S
        while listener.connections() > 0:
            assert time.monotonic() < deadline, "the listener never noticed the closed connection"
            time.sleep(0.01)
        third = cleanup.enter_context(connect_and_greet(address))
        assert _one_add(third, 8) == [(8, Status.OK)]
        # Closing the listener ends the open connection and refuses new ones.
        listener.close(timeout_s=WAIT_S)
        assert until_closed(third) == b""
        assert listener.connections() == 0
        with pytest.raises(ConnectionRefusedError):
            connect(address)
