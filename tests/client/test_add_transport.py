"""The client's plain-TCP add stream (pyspark_ledger.transport.add_streams.SocketAddStream) against a fake
add listener in this process: one request in flight with the rest coalesced, timeouts and broken
connections fail the pending adds and the next add reconnects, an unreachable listener fails fast.
Also the writer's split of a bookie's entries into bounded batches (ledger/add_batches.py)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace

import pytest

from bookie.proto import bookie_pb2 as pb
from bookie.proto.add_framing import HELLO_BYTES, FrameReader, FramingError, frame, hello, parse_hello, recv_exactly
from bookie.proto.versions import OUR_RANGE, WireRange
from bookie.status import Status
from pyspark_ledger.errors import BookieUnavailableError
from pyspark_ledger.ledger import add_batches
from pyspark_ledger.testing.zookeeper_server import free_port
from pyspark_ledger.transport import add_hello
from pyspark_ledger.transport.add_streams import SocketAddStream
from pyspark_ledger.transport.bookie_client import BookieClient
from pyspark_ledger.transport.encoded_batch import EncodedAddBatch
from tests.bookie.server_helpers import KEY, Acks

WAIT_S = 20.0
NO_GRPC = "127.0.0.1:1"  # these clients never make a gRPC call; adds go to the fake listener

# What the fake does with a request: answer every batch OK (or with a status code this client does
# not know), never answer, or drop the connection.
# (connection number, request number) -> "answer" | "unknown status" | "silent" | "close"
Policy = Callable[[int, int], str]


class FakeAddListener:
    """Speaks the add transport's hello and framing; records every AddRequest with the number of
    the connection it came on (1, 2, ...) and acts on it as `policy` says. A policy may call
    hold() to sit on a request until the test calls release.set() (or the fake closes)."""

    def __init__(self, policy: Policy, speaks: WireRange = OUR_RANGE):
        """speaks: the wire versions it answers like a bookie (echo one it speaks, else its highest and close)."""
        self.policy = policy
        self.speaks = speaks
        self.asked: list[int] = []  # the version each connection's hello asked for
        self.holding = threading.Event()
        self.release = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.requests: list[tuple[int, pb.AddRequest]] = []
        self.connections = 0
        self.ended: set[int] = set()  # connections that are over (either side closed)
        self.changed = threading.Condition()
        self._conns: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            with self.changed:
                self.connections += 1
                n = self.connections
                self._conns.append(conn)
                self.changed.notify_all()
            t = threading.Thread(target=self._serve, args=(conn, n), daemon=True)
            self._threads.append(t)
            t.start()

    def _serve(self, conn: socket.socket, n: int) -> None:
        try:
            asked = parse_hello(recv_exactly(conn, HELLO_BYTES))
            self.asked.append(asked)
            if asked not in self.speaks:
                conn.sendall(hello(self.speaks.high))
                return
            conn.sendall(hello(asked))
            frames = FrameReader(conn)
            while (body := frames.read()) is not None:
                request = pb.AddRequest.FromString(body)
                with self.changed:
                    self.requests.append((n, request))
                    number = len(self.requests)
                    self.changed.notify_all()
                action = self.policy(n, number)
                if action == "close":
                    return
                if action in ("answer", "unknown status"):
                    code = int(Status.OK) if action == "answer" else 99  # 99: a code from a newer bookie
                    response = pb.AddResponse(results=[pb.AddResult(request_id=b.request_id, status=code)
                                                       for b in request.batches])
                    conn.sendall(frame([response.SerializeToString()]))
        except (OSError, FramingError):
            pass
        finally:
            conn.close()
            with self.changed:
                self.ended.add(n)
                self.changed.notify_all()

    def hold(self) -> None:
        self.holding.set()
        self.release.wait(WAIT_S)

    def wait(self, predicate: Callable[[], bool], what: str) -> None:
        with self.changed:
            assert self.changed.wait_for(predicate, WAIT_S), f"fake add listener: {what} not within {WAIT_S:g} s"

    def batch_counts(self) -> list[tuple[int, int]]:
        """(connection, number of batches) of every request, in arrival order."""
        with self.changed:
            return [(n, len(r.batches)) for n, r in self.requests]

    def close(self) -> None:
        self.release.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes accept()
        except OSError:
            pass
        self.sock.close()
        with self.changed:
            conns = list(self._conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in self._threads:
            t.join(WAIT_S)


MakeFake = Callable[..., FakeAddListener]


@pytest.fixture
def fake_listener() -> Iterator[MakeFake]:
    started: list[FakeAddListener] = []

    def make(policy: Policy, speaks: WireRange = OUR_RANGE) -> FakeAddListener:
        f = FakeAddListener(policy, speaks)
        started.append(f)
        return f

    yield make
    for f in started:
        f.close()


def entry(e: int) -> list[tuple[int, int, bytes]]:
    return [(e, e - 1, f"entry-{e}".encode())]


# ---- one request in flight ----------------------------------------------------------------------

def test_client_keeps_two_requests_in_flight_and_coalesces_the_rest(fake_listener: MakeFake) -> None:
    def hold_the_first(conn: int, number: int) -> str:
        if number == 1:
            fake.hold()
        return "answer"

    fake = fake_listener(hold_the_first)
    acks = Acks()
    with BookieClient("holding", NO_GRPC, add_address=fake.address) as client:
        client.add_batch((0, 1), KEY, entry(0), acks.callback(entry(0)))
        assert fake.holding.wait(WAIT_S)
        assert isinstance(client._stream, SocketAddStream)
        # While the first request is unanswered, the next add goes out too (two in flight; the
        # bookie reads it once it answered the first), and nine more batches (two ledgers)
        # queue up behind them.
        for e in range(1, 11):
            client.add_batch((0, 1 + e % 2), KEY, entry(e), acks.callback(entry(e)))
        time.sleep(0.2)  # were anything more to go out early, it would have by now
        assert acks.count == 0 and fake.batch_counts() == [(1, 1)]
        assert client._stream.requests_in_flight == 2 and len(client._stream.queued) == 9
        fake.release.set()
        acks.wait(11)
    assert not acks.failed
    assert acks.ok == [entry(e) for e in range(11)]  # called back in the order sent
    # Exactly three requests on one connection: the two lone adds, then everything that queued
    # behind them, in order.
    assert fake.batch_counts() == [(1, 1), (1, 1), (1, 9)]
    third = fake.requests[2][1]
    assert [b.entry_ids[0] for b in third.batches] == list(range(2, 11))
    assert [b.ledger.ledger_id for b in third.batches] == [1 + e % 2 for e in range(2, 11)]
    assert fake.connections == 1


def test_a_lone_add_goes_out_alone_each_time(fake_listener: MakeFake) -> None:
    fake = fake_listener(lambda conn, number: "answer")
    with BookieClient("fake", NO_GRPC, add_address=fake.address) as client:
        for e in range(5):
            acks = Acks()
            client.add_batch((0, 1), KEY, entry(e), acks.callback(entry(e)))
            acks.wait(1)
            assert acks.ok == [entry(e)]
    assert fake.batch_counts() == [(1, 1)] * 5


# ---- failures -----------------------------------------------------------------------------------

def test_a_request_the_bookie_sits_on_times_out_and_the_next_add_reconnects(fake_listener: MakeFake) -> None:
    fake = fake_listener(lambda conn, number: "silent" if conn == 1 else "answer")
    with BookieClient("fake", NO_GRPC, add_address=fake.address, add_timeout_s=0.5) as client:
        acks = Acks()
        started = time.monotonic()
        client.add_batch((0, 1), KEY, entry(0), acks.callback(entry(0)))
        acks.wait(1)
        assert 0.4 <= time.monotonic() - started < 5.0
        assert acks.failed == [(Status.TIMEOUT, "add timed out")]
        # The client drops the stuck connection...
        fake.wait(lambda: 1 in fake.ended, "the client closing connection 1")
        # ...and the next add goes out on a new one instead of queueing behind the stuck request.
        client.add_batch((0, 1), KEY, entry(1), acks.callback(entry(1)))
        acks.wait(2)
        assert acks.ok == [entry(1)]
    assert fake.batch_counts() == [(1, 1), (2, 1)]


def test_an_add_made_from_a_timeout_callback_goes_out_on_a_new_connection(fake_listener: MakeFake) -> None:
    """The timed-out stream is dead before its callbacks run: a retry from one is sent (on a
    fresh connection), not failed unsent with the rest of the old stream."""
    fake = fake_listener(lambda conn, number: "silent" if conn == 1 else "answer")
    with BookieClient("fake", NO_GRPC, add_address=fake.address, add_timeout_s=0.5) as client:
        acks = Acks()
        retry = acks.callback(entry(1))

        def first(status: Status, message: str) -> None:
            acks.callback(entry(0))(status, message)
            if status == Status.TIMEOUT:
                client.add_batch((0, 1), KEY, entry(1), retry)

        client.add_batch((0, 1), KEY, entry(0), first)
        acks.wait(2)
        assert acks.failed == [(Status.TIMEOUT, "add timed out")]
        assert acks.ok == [entry(1)]
    assert fake.batch_counts() == [(1, 1), (2, 1)]


class _NobodyReads:
    """A StreamPoller that never reads: the state of a process whose reader has not run yet
    after a pause (SIGSTOP, a long GC pause), while its timer thread already has."""

    def register(self, stream: object) -> None:
        pass

    def unregister(self, stream: object) -> None:
        pass


def test_answers_waiting_on_the_socket_are_read_before_their_adds_time_out(fake_listener: MakeFake) -> None:
    fake = fake_listener(lambda conn, number: "answer")
    stream = SocketAddStream("paused", fake.address, _NobodyReads())
    try:
        acks = Acks()
        send = stream.submit(EncodedAddBatch((0, 1), KEY, entry(0)), acks.callback(entry(0)), 0.5)
        assert send is not None
        send()
        deadline = time.monotonic() + WAIT_S
        while not stream.answers_waiting():  # the bookie answered; nobody has read it yet
            assert time.monotonic() < deadline, "the fake's answer never arrived"
            time.sleep(0.01)
        # The timer thread runs first, well past the add's deadline: the answer waiting on the
        # socket is not judged late, and the stream stays up...
        stream.expire(time.monotonic() + 0.6)
        assert acks.count == 0 and not stream.dead
        # ...so when the reader runs, the add is acknowledged.
        stream.on_readable()
        assert acks.ok == [entry(0)] and not acks.failed and not stream.dead

        # The grace is bounded: answers that keep waiting unread do not hold an add for ever.
        send = stream.submit(EncodedAddBatch((0, 1), KEY, entry(1)), acks.callback(entry(1)), 0.5)
        assert send is not None
        send()
        while not stream.answers_waiting():
            assert time.monotonic() < deadline, "the fake's answer never arrived"
            time.sleep(0.01)
        stream.expire(time.monotonic() + 1.1)
        assert acks.failed == [(Status.TIMEOUT, "add timed out")] and stream.dead
    finally:
        stream.close()
        stream.finish("test over")


def test_a_status_code_this_client_does_not_know_fails_that_batch_only(fake_listener: MakeFake) -> None:
    fake = fake_listener(lambda conn, number: "unknown status" if number == 1 else "answer")
    with BookieClient("fake", NO_GRPC, add_address=fake.address) as client:
        acks = Acks()
        client.add_batch((0, 1), KEY, entry(0), acks.callback(entry(0)))
        acks.wait(1)
        assert acks.failed == [(Status.INTERNAL_ERROR, "unknown add status 99: ")]
        client.add_batch((0, 1), KEY, entry(1), acks.callback(entry(1)))  # the stream carries on
        acks.wait(2)
        assert acks.ok == [entry(1)]
    assert fake.batch_counts() == [(1, 1), (1, 1)]


def test_a_connection_the_bookie_drops_fails_every_pending_add_and_the_next_add_reconnects(
        fake_listener: MakeFake) -> None:
    def hang_up_on_the_first_two_connections(conn: int, number: int) -> str:
        if conn == 1:
            fake.hold()
            return "close"
        # The client resends what a close caught once, on a new connection (issue 31 item 3):
        # this bookie hangs up on that one too, so the adds fail.
        return "close" if conn == 2 else "answer"

    fake = fake_listener(hang_up_on_the_first_two_connections)
    with BookieClient("fake", NO_GRPC, add_address=fake.address) as client:
        acks = Acks()
        client.add_batch((0, 1), KEY, entry(0), acks.callback(entry(0)))
        assert fake.holding.wait(WAIT_S)
        for e in range(1, 4):  # the second in flight (never read), then two queued
            client.add_batch((0, 1), KEY, entry(e), acks.callback(entry(e)))
        fake.release.set()  # the bookie hangs up without answering
        acks.wait(4)
        assert acks.ok == []
        assert [s for s, _ in acks.failed] == [Status.INTERNAL_ERROR] * 4
        assert all(m.startswith("transport:") for _, m in acks.failed), acks.failed
        # A hang-up with our second request unread is a reset rather than a clean close.
        assert "closed by the bookie" in acks.failed[0][1] or "reset by peer" in acks.failed[0][1]
        client.add_batch((0, 1), KEY, entry(4), acks.callback(entry(4)))
        acks.wait(5)
        assert acks.ok == [entry(4)]
    # The bookie read only the first request of the first connection and of the resend's, then
    # the next add's on a third.
    assert fake.batch_counts() == [(1, 1), (2, 1), (3, 1)]


def test_the_add_address_is_looked_up_again_for_each_new_stream(fake_listener: MakeFake) -> None:
    old = fake_listener(lambda conn, number: "close")  # a bookie that goes away
    new = fake_listener(lambda conn, number: "answer")  # the same bookie, restarted on another port
    lookups: list[str] = []
    current = [old.address]

    def lookup() -> str:
        lookups.append(current[0])
        return current[0]

    with BookieClient("moving", NO_GRPC, add_address=lookup) as client:
        assert lookups == []  # nothing is looked up before the first add
        acks = Acks()
        client.add_batch((0, 1), KEY, entry(0), acks.callback(entry(0)))
        acks.wait(1)
        assert acks.failed and acks.failed[0][1].startswith("transport:")
        current[0] = new.address
        client.add_batch((0, 1), KEY, entry(1), acks.callback(entry(1)))
        client.add_batch((0, 1), KEY, entry(2), acks.callback(entry(2)))
        acks.wait(3)
        assert acks.ok == [entry(1), entry(2)]  # answers come back in order
    # Once per stream, not per add: the first stream, the resend's (the old bookie hangs up on it
    # too, so the add fails), then the new address.
    assert lookups == [old.address, old.address, new.address]
    assert old.connections == 2 and new.connections == 1


# ---- wire versions (bookie/proto/versions.py): a client newer than its bookie speaks the bookie's ----
# This release knows one version; a newer client is made by widening the range the hello module
# speaks, as a later release will.

def _adds_work(client: BookieClient) -> None:
    acks = Acks()
    client.add_batch((0, 1), KEY, entry(0), acks.callback(entry(0)))
    acks.wait(1)
    assert acks.ok == [entry(0)], acks.failed


def test_a_newer_client_speaks_the_version_an_older_bookie_advertises(
        fake_listener: MakeFake, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(add_hello, "OUR_RANGE", WireRange(1, 3))
    old_bookie = fake_listener(lambda conn, number: "answer", WireRange(1, 1))
    with BookieClient("old", NO_GRPC, add_address=old_bookie.address, wire_range=lambda: WireRange(1, 1)) as client:
        assert client.wire_version() == 1  # by its registration, before any connection
        _adds_work(client)
        assert isinstance(client._stream, SocketAddStream) and client._stream.wire_version == 1 == client.wire_version()
    assert old_bookie.asked == [1] and old_bookie.connections == 1  # no failed hello first
    both_newer = fake_listener(lambda conn, number: "answer", WireRange(1, 2))
    with BookieClient("newer", NO_GRPC, add_address=both_newer.address, wire_range=lambda: WireRange(1, 2)) as client:
        _adds_work(client)
        assert isinstance(client._stream, SocketAddStream) and client._stream.wire_version == 2
    assert both_newer.asked == [2]  # the highest both speak


def test_a_bookie_older_than_its_registration_says_gets_a_second_hello_in_its_version(
        fake_listener: MakeFake, monkeypatch: pytest.MonkeyPatch) -> None:
    """Downgraded since the client read its registration: it answers with its own highest and closes."""
    monkeypatch.setattr(add_hello, "OUR_RANGE", WireRange(1, 3))
    downgraded = fake_listener(lambda conn, number: "answer", WireRange(1, 1))
    with BookieClient("downgraded", NO_GRPC, add_address=downgraded.address, wire_range=lambda: WireRange(1, 3)) as client:
        _adds_work(client)
        assert isinstance(client._stream, SocketAddStream) and client._stream.wire_version == 1
    assert downgraded.asked == [3, 1] and downgraded.connections == 2


def test_a_bookie_sharing_no_version_fails_the_add_naming_both(
        fake_listener: MakeFake, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(add_hello, "OUR_RANGE", WireRange(2, 3))  # a client that dropped version 1
    ancient = fake_listener(lambda conn, number: "answer", WireRange(1, 1))
    with BookieClient("ancient", NO_GRPC, add_address=ancient.address, wire_range=lambda: WireRange(1, 1)) as client:
        with pytest.raises(BookieUnavailableError, match=r"no common wire version: this side speaks 2\.\.3, the peer 1"):
            client.add_batch((0, 1), KEY, entry(0), lambda status, message: None)
    assert ancient.connections == 0  # known from the registration: no connection at all
    with BookieClient("ancient", NO_GRPC, add_address=ancient.address) as client:  # no registration: asks for 3
        with pytest.raises(BookieUnavailableError, match=r"the bookie speaks add protocol version 1, this client 2\.\.3"):
            client.add_batch((0, 1), KEY, entry(0), lambda status, message: None)
    assert ancient.asked == [3]


def test_an_add_listener_nobody_listens_on_fails_the_add_at_once() -> None:
    address = f"127.0.0.1:{free_port()}"  # bound once and released: nothing listens there
    acks = Acks()
    with BookieClient("gone", NO_GRPC, add_address=address) as client:
        started = time.monotonic()
        with pytest.raises(BookieUnavailableError, match=f"bookie gone unavailable: add listener {address}"):
            client.add_batch((0, 1), KEY, entry(0), acks.callback(entry(0)))
        assert time.monotonic() - started < 2.0
        # The next add tries again (and fails the same way): no half-open stream was kept.
        with pytest.raises(BookieUnavailableError):
            client.add_batch((0, 1), KEY, entry(1), acks.callback(entry(1)))
        assert client._stream is None
    assert acks.count == 0  # raised, never called back


def test_a_listener_that_is_not_an_add_listener_fails_the_add() -> None:
    """Something else on the port (it answers the hello with other bytes): the connect fails."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer_http() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(HELLO_BYTES)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

    t = threading.Thread(target=answer_http, daemon=True)
    t.start()
    try:
        with BookieClient("other", NO_GRPC, add_address=f"127.0.0.1:{port}") as client:
            with pytest.raises(BookieUnavailableError, match="not an add-transport hello"):
                client.add_batch((0, 1), KEY, entry(0), lambda status, message: None)
    finally:
        t.join(WAIT_S)
        server.close()


# ---- the writer's batches -----------------------------------------------------------------------

def single(entry_id: int, size: int) -> tuple[SimpleNamespace, int, int]:
    """A single add as the machine hands it out: a segment (run, first id, last id) of one entry."""
    return SimpleNamespace(entry_id=entry_id, count=1, datas=[b"x" * size], lac=entry_id - 1), entry_id, entry_id


def cut(segments: list[tuple[SimpleNamespace, int, int]]) -> list[list[int]]:
    out = []
    for ids, lacs, datas in add_batches.batches(segments):
        assert len(ids) == len(lacs) == len(datas)
        out.append(list(ids))
    return out


def test_a_bookies_entries_are_split_into_batches_within_both_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(add_batches, "BATCH_ENTRIES_MAX", 4)
    monkeypatch.setattr(add_batches, "BATCH_BYTES_MAX", 1000)
    sizes = [400, 400, 400, 100, 100, 100, 100, 100, 1500, 10]
    batches = cut([single(i, n) for i, n in enumerate(sizes)])
    assert batches == [
        [0, 1],  # 800 bytes: a third 400 would pass 1000
        [2, 3, 4, 5],  # 700 bytes, but four entries
        [6, 7],  # 200 bytes: the next is too big to join
        [8],  # larger than the byte bound alone: still sent, on its own
        [9],
    ]
    assert [e for chunk in batches for e in chunk] == list(range(len(sizes)))  # order kept, nothing lost
    # The same entries as one run: the same cuts, the run sliced.
    run = SimpleNamespace(entry_id=0, count=len(sizes), datas=[b"x" * n for n in sizes], lac=-1)
    assert cut([(run, 0, 9)]) == batches
    assert cut([(run, 3, 5)]) == [[3, 4, 5]]  # a segment inside a run (after a change, or E > W)
    ids, lacs, datas = next(add_batches.batches([(run, 3, 5)]))
    assert lacs == [-1, -1, -1] and datas == run.datas[3:6]


def test_batches_of_entries_at_the_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(add_batches, "BATCH_ENTRIES_MAX", 3)
    monkeypatch.setattr(add_batches, "BATCH_BYTES_MAX", 300)

    def split(sizes: list[int]) -> list[list[int]]:
        return cut([single(i, n) for i, n in enumerate(sizes)])

    assert split([100, 100, 100]) == [[0, 1, 2]]  # exactly both bounds
    assert split([100, 100]) == [[0, 1]]
    assert split([100, 100, 101]) == [[0, 1], [2]]  # one byte over
    assert split([1] * 7) == [[0, 1, 2], [3, 4, 5], [6]]
    assert split([300, 1, 300]) == [[0], [1], [2]]
    assert split([]) == []  # nothing to send: no empty batch


# ---- who reads the answers (pyspark_ledger.transport.add_poller) --------------------------------

def wait_reading(client: BookieClient, done: threading.Event) -> None:
    """What an add future's waiter does: read the answers itself, or, while another thread
    reads, wait for it (it notifies when it hands reading over) and try again."""
    handover = threading.Condition()
    deadline = time.monotonic() + WAIT_S
    while not client.poller.drive(done.is_set, deadline, handover) and not done.is_set():
        with handover:
            handover.wait(0.01)
        assert time.monotonic() < deadline
    assert done.is_set()


def _answer_late(conn: int, number: int) -> str:
    # The answer comes 30 ms after the add, so the caller is waiting (reading) by then even on a
    # loaded machine; an immediate answer can reach the background reader first when the caller's
    # thread is descheduled for longer than the poller's grace (5 ms): a whole suite on two
    # processes once saw 29 of 50 read by the caller.
    time.sleep(0.03)
    return "answer"


def test_a_waiting_caller_reads_its_own_answers(fake_listener: MakeFake) -> None:
    fake = fake_listener(_answer_late)
    readers: list[int] = []
    with BookieClient("fake", NO_GRPC, add_address=fake.address) as client:
        for e in range(50):
            done = threading.Event()

            def callback(status: Status, message: str) -> None:
                readers.append(threading.get_ident())
                done.set()

            client.add_batch((0, 1), KEY, entry(e), callback)
            wait_reading(client, done)
    # Once the background reader handed over (after the first answer or so), every answer was
    # read, and its callback run, in this very thread: no hand-off.
    mine = readers.count(threading.get_ident())
    assert mine >= 45 and readers[-40:] == [threading.get_ident()] * 40, (mine, len(readers))


def test_answers_nobody_waits_for_are_read_in_the_background(fake_listener: MakeFake) -> None:
    fake = fake_listener(lambda conn, number: "answer")
    with BookieClient("fake", NO_GRPC, add_address=fake.address) as client:
        readers: list[int] = []
        done = threading.Event()

        def callback(status: Status, message: str) -> None:
            readers.append(threading.get_ident())
            done.set()

        started = time.monotonic()
        client.add_batch((0, 1), KEY, entry(0), callback)
        assert done.wait(WAIT_S), "nobody read the answer"
        assert readers != [threading.get_ident()]
        assert time.monotonic() - started < 1.0  # within the background reader's grace, not a timeout


def test_a_caller_reading_for_an_add_completed_elsewhere_is_woken(fake_listener: MakeFake) -> None:
    fake = fake_listener(lambda conn, number: "silent")  # the bookie never answers
    with BookieClient("fake", NO_GRPC, add_address=fake.address, add_timeout_s=60) as client:
        client.add_batch((0, 1), KEY, entry(0), lambda status, message: None)  # outstanding for a minute
        me = threading.get_ident()
        done = threading.Event()
        done_at: list[float] = []

        def complete_from_another_thread() -> None:
            deadline = time.monotonic() + WAIT_S
            while client.poller._leader != me and time.monotonic() < deadline:
                time.sleep(0.001)
            time.sleep(0.1)  # this thread's epoll_wait is well under way
            done_at.append(time.monotonic())
            done.set()
            client.poller.wake()  # what WriteHandle does after completing adds off the poller

        threading.Thread(target=complete_from_another_thread).start()
        # The background reader hands over to a caller that asked within one poll slice; the
        # caller waits on its condition (notified at the handover) and tries again.
        handover = threading.Condition()
        deadline = time.monotonic() + WAIT_S
        while not client.poller.drive(done.is_set, deadline, handover):
            with handover:
                handover.wait(0.01)
            assert time.monotonic() < deadline
        assert done.is_set() and time.monotonic() - done_at[0] < 0.03  # woken, not a poll slice later
