"""A connection to one bookie: a bidirectional add stream plus unary reads and control calls.

Adds are batched: many entries of one ledger per AddBatch, many batches per stream message. A
sender thread turns the outbound queue into stream messages, one in flight at a time, each
carrying everything queued while the previous one was out; a receiver thread completes the
callbacks by request id; a timer fails adds that outlive their timeout. When the stream breaks
(the bookie died), every pending add fails with BookieUnavailableError and the next add opens a
new stream. Every queue and wait here has a bound.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import grpc

from bookie.proto import bookie_pb2 as pb
from bookie.proto import bookie_pb2_grpc as pb_grpc
from bookie.status import Status
from pyspark_ledger.errors import BookieUnavailableError

log = logging.getLogger(__name__)

GRPC_MESSAGE_BYTES_MAX = 64 * 2**20
# One stream message carries at most this many payload bytes (several batches).
STREAM_MESSAGE_BYTES_MAX = 8 * 2**20
# Bound on add batches queued or in flight on one stream: callers block (bounded) beyond it.
OUTBOUND_BATCHES_MAX = 16_384
ENQUEUE_TIMEOUT_S = 30.0
_TIMER_INTERVAL_S = 0.05
# How often a sender waiting for its stream's in-flight request re-checks that the stream lives.
_SLOT_POLL_S = 0.5

AddCallback = Callable[[Status, str], None]
LedgerKey = tuple[int, int]
ADD_METHOD = f"/{pb.DESCRIPTOR.services_by_name['Bookie'].full_name}/Add"

# Request ids are unique per process, not per stream, so one encoded batch can go to every bookie
# of a write set: the same id is unique on each of their streams.
_request_ids = itertools.count(1)


class EncodedAddBatch:
    """An AddBatch serialized once, already framed as one `batches` element of an AddRequest:
    stream messages are the concatenation of such frames (protobuf's encoding of a repeated
    field), so coalescing batches costs a join and sending one to three bookies costs one
    serialization."""

    __slots__ = ("request_id", "frame", "payload_bytes")

    def __init__(self, ledger: LedgerKey, master_key: bytes, entries: Sequence[tuple[int, int, bytes]],
                 *, recovery: bool = False):
        self.request_id = next(_request_ids)
        body = pb.AddBatch(
            request_id=self.request_id, ledger=_ref(ledger), master_key=master_key, recovery=recovery,
            entry_ids=[e[0] for e in entries], lacs=[e[1] for e in entries], entries=[e[2] for e in entries],
        ).SerializeToString()
        self.frame = _BATCHES_TAG + _varint(len(body)) + body
        self.payload_bytes = sum(len(e[2]) for e in entries)


_BATCHES_TAG = bytes([(pb.AddRequest.DESCRIPTOR.fields_by_name["batches"].number << 3) | 2])


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


@dataclass
class _PendingAdd:
    callback: AddCallback
    deadline: float


def channel_options() -> list[tuple[str, int]]:
    return [
        ("grpc.max_receive_message_length", GRPC_MESSAGE_BYTES_MAX),
        ("grpc.max_send_message_length", GRPC_MESSAGE_BYTES_MAX),
        # Notice a dead peer on an idle connection.
        ("grpc.keepalive_time_ms", 10_000),
        ("grpc.keepalive_timeout_ms", 5_000),
        # A restarted bookie is reachable again within about a second.
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 300),
    ]


def _ref(ledger: LedgerKey) -> pb.LedgerRef:
    return pb.LedgerRef(scope_id=ledger[0], ledger_id=ledger[1])


class _AddStream:
    """One live Add stream. Dies as a whole: on error all its pending adds fail."""

    def __init__(self, client: "BookieClient"):
        self.client = client
        # A SimpleQueue (C, no Python-level locking) on the per-add path; its bound is enforced
        # on `pending`, which holds every queued and in-flight batch.
        self.outbound: queue.SimpleQueue[EncodedAddBatch | None] = queue.SimpleQueue()
        self.pending: dict[int, _PendingAdd] = {}
        self.lock = threading.Lock()
        self.room = threading.Condition(self.lock)
        self.room_waiters = 0
        self.dead = False
        # One request in flight per stream: the bookie answers each request once all its batches
        # are durable, and whatever queues meanwhile goes out as the next request, so batches
        # (and group commits) grow with load while a lone add goes out at once.
        self.slot = threading.Semaphore(1)
        # Fail fast: a stream into a channel that cannot connect fails at once (UNAVAILABLE), so a
        # dead bookie is replaced without waiting for add timeouts. Reconnect backoff is short, so a
        # restarted bookie is reachable again within about a second.
        self.call = client._add_method(self._requests())
        self.receiver = threading.Thread(target=self._receive, name=f"add-recv {client.bookie_id}", daemon=True)
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
            frames = [item.frame]
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
                frames.append(nxt.frame)
                size += nxt.payload_bytes
            yield frames[0] if len(frames) == 1 else b"".join(frames)

    def _receive(self) -> None:
        try:
            for response in self.call:
                self.slot.release()  # one response per request
                for r in response.results:
                    with self.lock:
                        p = self.pending.pop(r.request_id, None)
                        if self.room_waiters:
                            self.room.notify()
                    if p is not None:
                        p.callback(Status(r.status), r.message)
            self.fail("add stream closed by the bookie")
        except grpc.RpcError as exc:
            self.fail(f"add stream failed: {exc.code().name} {exc.details() or ''}".strip())
        except Exception as exc:  # noqa: BLE001 - never leave adds hanging
            log.exception("add stream receiver crashed bookie=%s", self.client.bookie_id)
            self.fail(f"add stream receiver crashed: {exc!r}")

    def submit(self, batch: EncodedAddBatch, callback: AddCallback, timeout_s: float) -> None:
        with self.lock:
            if len(self.pending) >= OUTBOUND_BATCHES_MAX:
                self.room_waiters += 1
                try:
                    has_room = self.room.wait_for(
                        lambda: self.dead or len(self.pending) < OUTBOUND_BATCHES_MAX, ENQUEUE_TIMEOUT_S)
                finally:
                    self.room_waiters -= 1
                if not has_room:
                    raise BookieUnavailableError(self.client.bookie_id, "outbound add queue stayed full")
            if self.dead:
                raise BookieUnavailableError(self.client.bookie_id, "add stream is closed")
            self.pending[batch.request_id] = _PendingAdd(callback, time.monotonic() + timeout_s)
        self.outbound.put(batch)

    def expire(self, now: float) -> None:
        with self.lock:
            expired = [rid for rid, p in self.pending.items() if p.deadline <= now]
            callbacks = [self.pending.pop(rid).callback for rid in expired]
            if callbacks and self.room_waiters:
                self.room.notify_all()
        for cb in callbacks:
            cb(Status.TIMEOUT, "add timed out")
        if callbacks:
            # The bookie sat on a request: with one in flight, nothing behind it would move.
            # Drop the stream; the next add opens a fresh one.
            self.fail("an add timed out; stream reset")
            self.close()

    def fail(self, reason: str) -> None:
        with self.lock:
            self.dead = True
            pending, self.pending = self.pending, {}
            self.room.notify_all()
        if pending:
            log.info("failing pending adds bookie=%s count=%d reason=%s", self.client.bookie_id, len(pending), reason)
        for p in pending.values():
            try:
                p.callback(Status.INTERNAL_ERROR, f"transport: {reason}")
            except Exception:  # noqa: BLE001
                log.exception("add callback failed")

    def close(self) -> None:
        self.outbound.put(None)
        self.call.cancel()


class BookieClient:
    def __init__(self, bookie_id: str, address: str, *, add_timeout_s: float = 10.0, rpc_timeout_s: float = 10.0):
        self.bookie_id = bookie_id
        self.address = address
        self.add_timeout_s = add_timeout_s
        self.rpc_timeout_s = rpc_timeout_s
        self._channel = grpc.insecure_channel(address, options=channel_options())
        self._stub = pb_grpc.BookieStub(self._channel)
        # The add stream sends pre-serialized requests (see EncodedAddBatch).
        self._add_method = self._channel.stream_stream(
            ADD_METHOD, request_serializer=None, response_deserializer=pb.AddResponse.FromString)
        self._stream: _AddStream | None = None
        self._stream_lock = threading.Lock()
        self._closed = threading.Event()
        self._timer = threading.Thread(target=self._expire_loop, name=f"add-timer {bookie_id}", daemon=True)
        self._timer.start()

    # ---- adds ---------------------------------------------------------------------------------

    def add_batch(
        self,
        ledger: LedgerKey,
        master_key: bytes,
        entries: Sequence[tuple[int, int, bytes]],
        callback: AddCallback,
        *,
        recovery: bool = False,
        timeout_s: float | None = None,
    ) -> None:
        """Send (entry_id, lac, data) entries of one ledger; `callback(status, message)` runs once,
        from a client thread, when the bookie acknowledged durably, refused, or the transport failed
        (INTERNAL_ERROR with a 'transport:' message) or timed out (TIMEOUT)."""
        self.add_encoded(EncodedAddBatch(ledger, master_key, entries, recovery=recovery), callback, timeout_s=timeout_s)

    def add_encoded(self, batch: EncodedAddBatch, callback: AddCallback, *, timeout_s: float | None = None) -> None:
        """`add_batch` for a batch already encoded (possibly shared with other bookies)."""
        stream = self._add_stream()
        stream.submit(batch, callback, self.add_timeout_s if timeout_s is None else timeout_s)

    def _add_stream(self) -> _AddStream:
        with self._stream_lock:
            if self._closed.is_set():
                raise BookieUnavailableError(self.bookie_id, "client closed")
            if self._stream is None or self._stream.dead:
                self._stream = _AddStream(self)
            return self._stream

    def _expire_loop(self) -> None:
        while not self._closed.wait(_TIMER_INTERVAL_S):
            stream = self._stream
            if stream is not None:
                stream.expire(time.monotonic())

    # ---- unary calls --------------------------------------------------------------------------

    def _unary(self, method: Callable[..., object], request: object, timeout_s: float | None) -> object:
        # Fail fast (no wait_for_ready): a dead bookie must not stall failover. Channels retry a
        # restarted bookie every <= 300 ms, and readers make one more round after a pause.
        try:
            return method(request, timeout=timeout_s or self.rpc_timeout_s)
        except grpc.RpcError as exc:
            raise BookieUnavailableError(self.bookie_id, f"{exc.code().name} {exc.details() or ''}".strip()) from None

    def read(
        self, ledger: LedgerKey, first: int, last: int, *, max_entries: int = 0, max_bytes: int = 0,
        fence: bool = False, master_key: bytes = b"", long_poll_min_lac: int | None = None,
        long_poll_timeout_ms: int = 0, timeout_s: float | None = None, entry_runs: bool = False,
    ) -> pb.ReadResponse:
        """entry_runs: answer with ReadResponse.runs (one buffer per run of consecutive OK
        entries; entry_ids/entry_status then list only the other entries), see bookie.proto."""
        req = pb.ReadRequest(
            ledger=_ref(ledger), first_entry_id=first, last_entry_id=last, max_entries=max_entries,
            max_bytes=max_bytes, fence=fence, master_key=master_key, long_poll_timeout_ms=long_poll_timeout_ms,
            entry_runs=entry_runs,
        )
        if long_poll_min_lac is not None:
            req.long_poll_min_lac = long_poll_min_lac
            timeout_s = (timeout_s or self.rpc_timeout_s) + long_poll_timeout_ms / 1000
        return self._unary(self._stub.Read, req, timeout_s)  # type: ignore[return-value]

    def read_lac(self, ledger: LedgerKey, *, long_poll_min_lac: int | None = None, long_poll_timeout_ms: int = 0,
                 timeout_s: float | None = None) -> pb.ReadLacResponse:
        req = pb.ReadLacRequest(ledger=_ref(ledger), long_poll_timeout_ms=long_poll_timeout_ms)
        if long_poll_min_lac is not None:
            req.long_poll_min_lac = long_poll_min_lac
            timeout_s = (timeout_s or self.rpc_timeout_s) + long_poll_timeout_ms / 1000
        return self._unary(self._stub.ReadLac, req, timeout_s)  # type: ignore[return-value]

    def write_lac(self, ledger: LedgerKey, master_key: bytes, lac: int, timeout_s: float | None = None) -> pb.WriteLacResponse:
        req = pb.WriteLacRequest(ledger=_ref(ledger), master_key=master_key, lac=lac)
        return self._unary(self._stub.WriteLac, req, timeout_s)  # type: ignore[return-value]

    def fence(self, ledger: LedgerKey, master_key: bytes, timeout_s: float | None = None) -> pb.FenceResponse:
        return self._unary(self._stub.Fence, pb.FenceRequest(ledger=_ref(ledger), master_key=master_key), timeout_s)  # type: ignore[return-value]

    def delete_ledger(self, ledger: LedgerKey, timeout_s: float | None = None) -> pb.DeleteLedgerResponse:
        return self._unary(self._stub.DeleteLedger, pb.DeleteLedgerRequest(ledger=_ref(ledger)), timeout_s)  # type: ignore[return-value]

    def info(self, timeout_s: float | None = None) -> pb.InfoResponse:
        return self._unary(self._stub.Info, pb.InfoRequest(), timeout_s)  # type: ignore[return-value]

    def wait_ready(self, timeout_s: float) -> None:
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout_s)
        except grpc.FutureTimeoutError:
            raise BookieUnavailableError(self.bookie_id, f"not reachable at {self.address} within {timeout_s:g} s") from None

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        with self._stream_lock:
            if self._stream is not None:
                self._stream.close()
                self._stream.fail("client closed")
        self._channel.close()
        self._timer.join(timeout=1)

    def __enter__(self) -> "BookieClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
