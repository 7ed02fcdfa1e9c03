"""A connection to one bookie: a bidirectional add stream plus unary reads and control calls.

Adds are batched: many entries of one ledger per AddBatch, many batches per stream message. A
sender thread turns the outbound queue into stream messages; a receiver thread completes the
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
# Bound on add batches queued for the sender: callers block (bounded) beyond it.
OUTBOUND_BATCHES_MAX = 16_384
ENQUEUE_TIMEOUT_S = 30.0
_TIMER_INTERVAL_S = 0.05

AddCallback = Callable[[Status, str], None]
LedgerKey = tuple[int, int]


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
        self.outbound: queue.Queue[pb.AddBatch | None] = queue.Queue(OUTBOUND_BATCHES_MAX)
        self.pending: dict[int, _PendingAdd] = {}
        self.lock = threading.Lock()
        self.dead = False
        # Fail fast: a stream into a channel that cannot connect fails at once (UNAVAILABLE), so a
        # dead bookie is replaced without waiting for add timeouts. Reconnect backoff is short, so a
        # restarted bookie is reachable again within about a second.
        self.call = client._stub.Add(self._requests())
        self.receiver = threading.Thread(target=self._receive, name=f"add-recv {client.bookie_id}", daemon=True)
        self.receiver.start()

    def _requests(self) -> Iterator[pb.AddRequest]:
        while True:
            item = self.outbound.get()
            if item is None:
                return
            batches = [item]
            size = sum(len(e) for e in item.entries)
            # Greedily coalesce whatever else is queued into the same stream message.
            while size < STREAM_MESSAGE_BYTES_MAX:
                try:
                    nxt = self.outbound.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    yield pb.AddRequest(batches=batches)
                    return
                batches.append(nxt)
                size += sum(len(e) for e in nxt.entries)
            yield pb.AddRequest(batches=batches)

    def _receive(self) -> None:
        try:
            for response in self.call:
                for r in response.results:
                    with self.lock:
                        p = self.pending.pop(r.request_id, None)
                    if p is not None:
                        p.callback(Status(r.status), r.message)
            self.fail("add stream closed by the bookie")
        except grpc.RpcError as exc:
            self.fail(f"add stream failed: {exc.code().name} {exc.details() or ''}".strip())
        except Exception as exc:  # noqa: BLE001 - never leave adds hanging
            log.exception("add stream receiver crashed bookie=%s", self.client.bookie_id)
            self.fail(f"add stream receiver crashed: {exc!r}")

    def submit(self, batch: pb.AddBatch, callback: AddCallback, timeout_s: float) -> None:
        with self.lock:
            if self.dead:
                raise BookieUnavailableError(self.client.bookie_id, "add stream is closed")
            self.pending[batch.request_id] = _PendingAdd(callback, time.monotonic() + timeout_s)
        try:
            self.outbound.put(batch, timeout=ENQUEUE_TIMEOUT_S)
        except queue.Full:
            with self.lock:
                self.pending.pop(batch.request_id, None)
            raise BookieUnavailableError(self.client.bookie_id, "outbound add queue stayed full") from None

    def expire(self, now: float) -> None:
        with self.lock:
            expired = [rid for rid, p in self.pending.items() if p.deadline <= now]
            callbacks = [self.pending.pop(rid).callback for rid in expired]
        for cb in callbacks:
            cb(Status.TIMEOUT, "add timed out")

    def fail(self, reason: str) -> None:
        with self.lock:
            self.dead = True
            pending, self.pending = self.pending, {}
        if pending:
            log.info("failing pending adds bookie=%s count=%d reason=%s", self.client.bookie_id, len(pending), reason)
        for p in pending.values():
            try:
                p.callback(Status.INTERNAL_ERROR, f"transport: {reason}")
            except Exception:  # noqa: BLE001
                log.exception("add callback failed")

    def close(self) -> None:
        try:
            self.outbound.put_nowait(None)
        except queue.Full:
            pass
        self.call.cancel()


class BookieClient:
    def __init__(self, bookie_id: str, address: str, *, add_timeout_s: float = 10.0, rpc_timeout_s: float = 10.0):
        self.bookie_id = bookie_id
        self.address = address
        self.add_timeout_s = add_timeout_s
        self.rpc_timeout_s = rpc_timeout_s
        self._channel = grpc.insecure_channel(address, options=channel_options())
        self._stub = pb_grpc.BookieStub(self._channel)
        self._stream: _AddStream | None = None
        self._stream_lock = threading.Lock()
        self._ids = itertools.count(1)
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
        batch = pb.AddBatch(
            request_id=next(self._ids), ledger=_ref(ledger), master_key=master_key, recovery=recovery,
            entry_ids=[e[0] for e in entries], lacs=[e[1] for e in entries], entries=[e[2] for e in entries],
        )
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
        long_poll_timeout_ms: int = 0, timeout_s: float | None = None,
    ) -> pb.ReadResponse:
        req = pb.ReadRequest(
            ledger=_ref(ledger), first_entry_id=first, last_entry_id=last, max_entries=max_entries,
            max_bytes=max_bytes, fence=fence, master_key=master_key, long_poll_timeout_ms=long_poll_timeout_ms,
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
