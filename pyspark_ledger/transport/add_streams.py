"""Add streams to one bookie: batches out, one result per batch back, every wait bounded.

Two transports carry the same bookie.proto AddRequest / AddResponse messages with the same
contract (the bookie answers each request once, in order, when all its batches are durable):

- SocketAddStream, plain TCP to the bookie's add listener (docs/add-transport.md), the default
  wherever a bookie advertises one. The thread that has work sends it: an add goes out from the
  caller's own thread when nothing is in flight, and the reader sends whatever queued meanwhile
  as soon as the answer it was waiting for arrives. Answers are read by the client's AddPoller:
  by the very thread that waits for them when there is one, so a synchronous add costs no
  thread hand-off (pyspark_ledger.transport.add_poller).
- GrpcAddStream, gRPC's bidirectional Add stream, for bookies without an add listener. gRPC
  consumes a request iterator on a thread of its own; a receiver thread reads the answers.

Both bound the requests in flight (two over TCP, see SocketAddStream; one over gRPC) and coalesce
whatever queues meanwhile into the next, so batches (and the bookies' group commits) grow with
load while a lone add goes out at once. A stream dies
as a whole: when it breaks, every pending add fails (INTERNAL_ERROR, 'transport: ...') and the
next add opens a new stream. One exception: a plain-TCP connection the bookie closed or reset
(it closes idle ones, --idle-connection-timeout-s, and a close can cross an add just sent) hands
its pending adds to its owner, which sends each once more on a new connection (an add is
idempotent on a bookie) before anything fails: no ensemble change for an idle close. An add
unanswered past its timeout fails with TIMEOUT and resets the stream (the bookie answers in
order: nothing behind that request would move).
"""
from __future__ import annotations

import logging
import queue
import select
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import grpc
from google.protobuf.message import DecodeError

from bookie.proto import bookie_pb2 as pb
from bookie.proto.add_framing import RECV_BYTES, FramingError, frame_header, sendall_parts, split_frames
from bookie.proto.versions import WireRange
from bookie.status import Status
from pyspark_ledger.errors import BookieUnavailableError
from pyspark_ledger.transport.add_hello import open_add_connection
from pyspark_ledger.transport.encoded_batch import EncodedAddBatch
from pyspark_ledger.transport.tls_socket import TlsSocketIO

log = logging.getLogger(__name__)

# One stream message carries at most this many payload bytes (several batches).
STREAM_MESSAGE_BYTES_MAX = 8 * 2**20
# Bound on add batches queued or in flight on one stream: callers block (bounded) beyond it.
OUTBOUND_BATCHES_MAX = 16_384
ENQUEUE_TIMEOUT_S = 30.0
# How often a gRPC sender waiting for its stream's in-flight request re-checks that the stream lives.
_SLOT_POLL_S = 0.5
# Unanswered requests on one plain-TCP add connection (see SocketAddStream).
REQUESTS_IN_FLIGHT_MAX = 2

AddCallback = Callable[[Status, str], None]

_STATUS_BY_CODE = {int(s): s for s in Status}


class StreamPoller(Protocol):
    """Who reads a SocketAddStream's answers (transport.add_poller.AddPoller): declared here, so
    a stream needs neither the poller's module nor the BookieClient that owns it."""

    def register(self, stream: SocketAddStream) -> None: ...

    def unregister(self, stream: SocketAddStream) -> None: ...

@dataclass(slots=True)
class StreamedAdd:
    callback: AddCallback
    deadline: float
    timeout_s: float
    batch: EncodedAddBatch
    resent: bool = False  # sent once more after the bookie closed its connection (never twice)
    on_stored: StoredCallback | None = None  # told a refused run's durable prefix, before `callback`


# Told, before a refusal's AddCallback, how many leading entries of the batch the bookie stored
# all the same (wire version 2: a run refused from one of its entries on).
StoredCallback = Callable[[int], None]


# A SocketAddStream's owner, given the adds a connection the bookie closed still owed answers for.
Resend = Callable[[list[StreamedAdd]], None]


class AddStream:
    """What both transports share: the table of unanswered batches (bounded), their callbacks,
    timeouts and failure."""

    def __init__(self, bookie_id: str):
        self.bookie_id = bookie_id  # all a stream knows of the client that owns it: for errors and logs
        self.pending: dict[int, StreamedAdd] = {}  # every queued and in-flight batch
        self.lock = threading.Lock()
        self.room = threading.Condition(self.lock)
        self.room_waiters = 0
        self.dead = False
        self.wire_version = 1  # the version the stream speaks (batches are encoded for it)

    def _admit(self, batch: EncodedAddBatch, callback: AddCallback, timeout_s: float,
               previous: StreamedAdd | None = None, on_stored: StoredCallback | None = None) -> None:
        """Under the lock: record the batch as pending (`previous`: a resent one, its deadline
        kept), waiting (bounded) for room."""
        if len(self.pending) >= OUTBOUND_BATCHES_MAX:
            self.room_waiters += 1
            try:
                has_room = self.room.wait_for(
                    lambda: self.dead or len(self.pending) < OUTBOUND_BATCHES_MAX, ENQUEUE_TIMEOUT_S)
            finally:
                self.room_waiters -= 1
            if not has_room:
                raise BookieUnavailableError(self.bookie_id, "outbound add queue stayed full")
        if self.dead:
            raise BookieUnavailableError(self.bookie_id, "add stream is closed")
        self.pending[batch.request_id] = previous or StreamedAdd(callback, time.monotonic() + timeout_s, timeout_s, batch,
                                                                 on_stored=on_stored)

    def _complete(self, results: Sequence[pb.AddResult]) -> None:
        with self.lock:  # one acquisition for a whole response
            done = [self.pending.pop(r.request_id, None) for r in results]
            if self.room_waiters:
                self.room.notify_all()
        for r, p in zip(results, done):
            if p is not None:
                status = _STATUS_BY_CODE.get(r.status)
                if status is None:  # a newer bookie's code: this batch failed, the stream is fine
                    p.callback(Status.INTERNAL_ERROR, f"unknown add status {r.status}: {r.message}")
                else:
                    if r.stored_count and status != Status.OK and p.on_stored is not None:
                        p.on_stored(r.stored_count)
                    p.callback(status, r.message)

    def submit(self, batch: EncodedAddBatch, callback: AddCallback, timeout_s: float,
               previous: StreamedAdd | None = None, on_stored: StoredCallback | None = None) -> Callable[[], None] | None:
        """Queue `batch`; if the caller must send it itself, the send is returned to be run as soon
        as possible (a writer claims every bookie of a write set first, then sends to all of them
        back to back), otherwise None. `previous`: the batch is resent (Resend), its record kept."""
        raise NotImplementedError

    def close(self) -> None:
        """Break the transport; the stream's threads wind down on their own."""
        raise NotImplementedError

    def answers_waiting(self) -> bool:
        """Whether answers have arrived that nobody has read yet (the transport knows)."""
        return False

    def expire(self, now: float) -> None:
        """Time out the adds past their deadline.

        Answers already waiting to be read are read first: after a pause of the whole process
        (a GC pause, SIGSTOP) the timer thread may run before the reader, and would otherwise
        time out adds that healthy bookies answered long ago, making the whole write set look
        failed at once. While answers wait, an add gets at most one more timeout's grace (the
        reader takes them within a tick; a bookie dribbling answers forever still times out)."""
        waiting = self.answers_waiting()
        with self.lock:
            expired = [rid for rid, p in self.pending.items()
                       if p.deadline <= now and not (waiting and now < p.deadline + p.timeout_s)]
            if not expired:
                return
            callbacks = [self.pending.pop(rid).callback for rid in expired]
            # The bookie sat on a request: it answers in order, so nothing behind it would move.
            # The stream is dead from here on (before any callback runs, so an add made from
            # one opens a fresh stream instead of joining this one).
            self.dead = True
            self.room.notify_all()
        for cb in callbacks:
            cb(Status.TIMEOUT, "add timed out")
        self.fail("an add timed out; stream reset")
        self.close()

    def fail(self, reason: str) -> None:
        with self.lock:
            self.dead = True
            pending, self.pending = self.pending, {}
            self.room.notify_all()
        if pending:
            log.info("failing pending adds bookie=%s count=%d reason=%s", self.bookie_id, len(pending), reason)
        for p in pending.values():
            try:
                p.callback(Status.INTERNAL_ERROR, f"transport: {reason}")
            except Exception:
                log.exception("add callback failed")


class GrpcAddStream(AddStream):
    """One live gRPC Add stream."""

    def __init__(self, bookie_id: str, add_method: Callable[[Iterator[bytes]], grpc.Call], wire_version: int = 1):
        """wire_version: what the bookie advertised both speak (1 when it advertised nothing: a
        bookie of version 1 would ignore a run's fields and refuse the empty batch)."""
        super().__init__(bookie_id)
        self.wire_version = wire_version
        # A SimpleQueue (C, no Python-level locking) on the per-add path; its bound is enforced
        # on `pending`, which holds every queued and in-flight batch.
        self.outbound: queue.SimpleQueue[EncodedAddBatch | None] = queue.SimpleQueue()
        self.slot = threading.Semaphore(1)  # one request in flight
        # Fail fast: a stream into a channel that cannot connect fails at once (UNAVAILABLE), so a
        # dead bookie is replaced without waiting for add timeouts.
        self.call = add_method(self._requests())
        self.receiver = threading.Thread(target=self._receive, name=f"add-recv {bookie_id}", daemon=True)
        self.receiver.start()

    def _requests(self) -> Iterator[bytes]:
        """Serialized AddRequests: each the frames of whatever batches are queued, joined."""
        while True:
            item = self.outbound.get()
            if item is None:
                return
            while not self.slot.acquire(timeout=_SLOT_POLL_S):
                if self.dead:
                    return  # the stream broke; its pending adds were failed
            version = self.wire_version
            frames = [item.frame_for(version)]
            size = item.payload_bytes
            # Greedily coalesce whatever else is queued into the same stream message.
            while size < STREAM_MESSAGE_BYTES_MAX:
                try:
                    nxt = self.outbound.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    yield b"".join(frames)
                    return
                frames.append(nxt.frame_for(version))
                size += nxt.payload_bytes
            yield frames[0] if len(frames) == 1 else b"".join(frames)

    def _receive(self) -> None:
        try:
            for response in self.call:
                self.slot.release()  # one response per request
                self._complete(response.results)
            self.fail("add stream closed by the bookie")
        except grpc.RpcError as exc:
            self.fail(f"add stream failed: {exc.code().name} {exc.details() or ''}".strip())
        except Exception as exc:  # never leave adds hanging
            log.exception("add stream receiver crashed bookie=%s", self.bookie_id)
            self.fail(f"add stream receiver crashed: {exc!r}")

    def submit(self, batch: EncodedAddBatch, callback: AddCallback, timeout_s: float,
               previous: StreamedAdd | None = None, on_stored: StoredCallback | None = None) -> Callable[[], None] | None:
        with self.lock:
            self._admit(batch, callback, timeout_s, previous, on_stored)
        self.outbound.put(batch)  # gRPC's own thread sends it
        return None

    def close(self) -> None:
        self.outbound.put(None)
        self.call.cancel()


class SocketAddStream(AddStream):
    """One TCP connection to a bookie's add listener.

    At most REQUESTS_IN_FLIGHT_MAX requests are unanswered at a time; a batch that finds them
    all out (or others already queued) is queued, and the reader sends what queued, coalesced
    into one request, as each answer arrives. Two in flight, not one: with E = W, one bookie of
    each write set is still answering the previous add when a synchronous writer sends its next
    one, and holding the new add back for it would leave every add racing only two bookies for
    its two acks instead of three. Sends are serialised (`_send_lock`); two requests sent by two
    threads may reach the bookie in either order, which is fine: answers are matched by request
    id, and the bookie's index is by entry id.

    Answers are read by the client's AddPoller (transport.add_poller, seen here as a StreamPoller):
    by whichever thread waits for an add, or its background reader; one thread at a time, so
    `on_readable` never runs twice at once. The socket is shut down (which makes it readable: the reader then fails
    what is pending) by whoever notices trouble, and closed only once the reader is done with
    it and no sender can still be using it."""

    def __init__(self, bookie_id: str, address: str, poller: StreamPoller, ssl_context: ssl.SSLContext | None = None,
                 bookie_range: WireRange | None = None, resend: Resend | None = None):
        """bookie_range: the wire versions the bookie advertises (its registration; None: assume
        this client's); the stream speaks the highest version both support (`wire_version`,
        transport.add_hello). resend: given the adds not yet resent when the bookie closes or
        resets the connection (None: they fail)."""
        super().__init__(bookie_id)
        self._resend = resend
        self.address = address
        self.poller = poller
        self._ssl_context = ssl_context
        self.sock, self.wire_version = open_add_connection(bookie_id, address, ssl_context, bookie_range)
        # Over TLS, reads and sends go through one lock on a non-blocking socket (tls_socket.py).
        self._tls = TlsSocketIO(self.sock) if isinstance(self.sock, ssl.SSLSocket) else None
        self.requests_in_flight = 0
        self.queued: deque[EncodedAddBatch] = deque()
        self._unread = b""  # the start of a frame whose rest has not arrived yet
        self._send_lock = threading.Lock()
        self._senders = 0  # threads about to send or sending (the socket stays open for them)
        self._reader_done = False
        self._closed = False
        self._broken_reason: str | None = None
        self._broken_by_peer = False  # the break was the bookie's close or reset (a failed send)
        try:
            poller.register(self)
        except OSError as exc:
            self.sock.close()
            raise BookieUnavailableError(bookie_id, f"add listener {address}: {exc}") from None

    def answers_waiting(self) -> bool:
        if self._reader_done:
            return False
        if self._tls is not None and self._tls.pending():
            return True  # decrypted bytes that select() cannot see
        try:
            readable, _, _ = select.select([self.sock], [], [], 0)
        except (OSError, ValueError):
            return False  # closed under us: the reader fails what is pending
        return bool(readable)

    def submit(self, batch: EncodedAddBatch, callback: AddCallback, timeout_s: float,
               previous: StreamedAdd | None = None, on_stored: StoredCallback | None = None) -> Callable[[], None] | None:
        with self.lock:
            self._admit(batch, callback, timeout_s, previous, on_stored)
            if self.requests_in_flight >= REQUESTS_IN_FLIGHT_MAX or self.queued:
                self.queued.append(batch)  # the reader sends it, in order, as answers arrive
                return None
            self.requests_in_flight += 1  # this caller sends, and must (the returned call)
            self._senders += 1
        return lambda: self._send([batch])

    def _answered(self) -> list[EncodedAddBatch]:
        """Under the lock, by the reader, for each answer: one request fewer in flight, and the
        next request's batches (bounded) if any are queued, which the reader then must send (a
        dead stream sends nothing: its pending adds, queued ones included, are failed)."""
        self.requests_in_flight -= 1
        out: list[EncodedAddBatch] = []
        if self.queued and not self.dead:
            size = 0
            while self.queued and size < STREAM_MESSAGE_BYTES_MAX:
                b = self.queued.popleft()
                out.append(b)
                size += b.payload_bytes
            self.requests_in_flight += 1
            self._senders += 1
        return out

    def _send(self, batches: list[EncodedAddBatch]) -> None:
        """Send one request (the caller counted itself in `_senders` under the lock)."""
        try:
            version = self.wire_version
            if len(batches) == 1:
                parts = batches[0].request_parts(version)
            else:
                body = [part for b in batches for part in b.frame_parts(version)]
                parts = [frame_header(sum(map(len, body))), *body]
            with self._send_lock:
                if self._tls is not None:
                    self._tls.sendall(b"".join(parts))
                else:
                    sendall_parts(self.sock, parts)  # large entries go out from their own buffers
        except OSError as exc:
            self._break(f"add connection to {self.address} failed: {exc}", by_peer=True)
        except FramingError as exc:
            self._break(f"add connection to {self.address} failed: {exc}")
        finally:
            with self.lock:
                self._senders -= 1
                close_now = self._reader_done and not self._senders
            if close_now:
                self._close_socket()

    def on_readable(self) -> None:
        """The poller's reader: take what arrived, and handle every complete answer in it."""
        if self._reader_done:
            return
        try:
            if self._tls is not None:
                data = self._tls.recv_available(RECV_BYTES)
                if data is None:
                    return  # only part of a TLS record arrived
            else:
                data = self.sock.recv(RECV_BYTES, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self.finish(f"add connection to {self.address} failed: {exc}", by_peer=True)
            return
        if not data:
            self.finish("add connection closed by the bookie", by_peer=True)
            return
        try:
            if self._unread:
                data = self._unread + data
            bodies, used = split_frames(data)
            self._unread = data[used:]
            for body in bodies:
                results = pb.AddResponse.FromString(body).results
                with self.lock:
                    nxt = self._answered()
                if nxt:
                    self._send(nxt)  # keep the bookie busy while these callbacks run
                self._complete(results)
        except (FramingError, DecodeError) as exc:
            self.finish(f"add connection to {self.address} failed: {exc}")
        except Exception as exc:  # never leave adds hanging
            log.exception("add answer handling crashed bookie=%s", self.bookie_id)
            self.finish(f"add answer handling crashed: {exc!r}")

    def finish(self, reason: str, by_peer: bool = False) -> None:
        """The reader is done with this connection: fail what is pending (or hand it to `resend`
        when the bookie closed it), leave the poller, and close the socket unless a sender still
        uses it (then the sender closes it)."""
        with self.lock:
            if self._reader_done:
                return
            self._reader_done = True
            by_peer = self._broken_by_peer if self._broken_reason is not None else by_peer
            again = self._take_resendable() if by_peer and self._resend is not None else []
        self.fail(self._broken_reason or reason)
        if again and self._resend is not None:
            log.info("resending adds on a new connection bookie=%s count=%d reason=%s", self.bookie_id, len(again),
                     self._broken_reason or reason)
            self._resend(again)
        self.poller.unregister(self)
        with self.lock:
            close_now = not self._senders
        if close_now:
            self._close_socket()

    def _take_resendable(self) -> list[StreamedAdd]:
        """Under the lock: the stream is dead, and its pending adds not resent before leave it."""
        self.dead = True
        again = [p for p in self.pending.values() if not p.resent]
        for p in again:
            del self.pending[p.batch.request_id]
        self.queued.clear()  # those queued are among them, or failed right after
        self.room.notify_all()
        return again

    def _break(self, reason: str, by_peer: bool = False) -> None:
        """Shut the connection down (safe from any thread: the fd stays open); the reader then
        fails whatever is pending with `reason`."""
        with self.lock:
            if self._broken_reason is None:
                self._broken_reason = reason
                self._broken_by_peer = by_peer
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already shut down, or never fully connected

    def _close_socket(self) -> None:
        with self.lock:
            if self._closed:
                return
            self._closed = True
        self.sock.close()

    def close(self) -> None:
        self._break("add stream closed")
