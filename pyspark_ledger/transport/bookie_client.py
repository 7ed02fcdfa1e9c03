"""A connection to one bookie: an add stream plus unary reads and control calls.

Adds go over the bookie's plain-TCP add listener when it advertises one (the low-latency path),
otherwise over gRPC's Add stream (pyspark_ledger.transport.add_streams has both). When a stream breaks (the
bookie died), every pending add fails with a transport error and the next add opens a new stream,
looking the add listener's address up again, so a restarted bookie's new port is found. Run reads
(read_runs, the bulk range reads) go over read connections to the same listener where the bookie
offers them (pyspark_ledger.transport.read_connections), else over gRPC; other reads and control
calls are unary gRPC. Every queue and wait here has a bound.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import grpc

from bookie.proto import bookie_pb2 as pb
from bookie.proto import bookie_pb2_grpc as pb_grpc
from bookie.proto.versions import OUR_RANGE, WireRange, negotiate
from bookie.status import Status
from pyspark_ledger.errors import BookieBusyError, BookieRefusedError, BookieUnavailableError
from pyspark_ledger.transport.add_poller import AddPoller
from pyspark_ledger.transport.add_streams import (
    AddCallback,
    AddStream,
    GrpcAddStream,
    SocketAddStream,
    StoredCallback,
    StreamedAdd,
)
from pyspark_ledger.transport.credentials import with_operator_secret
from pyspark_ledger.transport.encoded_batch import EncodedAddBatch, LedgerKey, ledger_ref
from pyspark_ledger.transport.read_connections import ReadConnections, read_connections_enabled
from pyspark_ledger.transport.run_response import RunResponse, parse_run_response
from pyspark_ledger.transport.tls import TlsSettings, grpc_failure_hint

log = logging.getLogger(__name__)

GRPC_MESSAGE_BYTES_MAX = 64 * 2**20
_TIMER_INTERVAL_S = 0.05
# A timer tick this late means the process (not one bookie) stalled: see _expire_loop.
_PAUSE_DETECT_S = 1.0
_SERVICE = pb.DESCRIPTOR.services_by_name["Bookie"].full_name
ADD_METHOD = f"/{_SERVICE}/Add"
READ_METHOD = f"/{_SERVICE}/Read"

__all__ = ["BookieClient", "EncodedAddBatch", "channel_options"]

_Response = TypeVar("_Response")


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


class BookieClient:
    """`add_address`: where the bookie's add listener is ("" = none: add over gRPC), or a
    function that looks it up, called whenever an add stream opens (BookiePool passes one that
    reads the bookie's registration). `tls`: encrypt both transports and verify the bookie's
    certificate (pyspark_ledger.transport.tls); None = plaintext. `operator_secret`: sent with
    every gRPC call (pyspark_ledger.transport.credentials); None = calls carry no operator identity.
    `wire_range`: the wire versions the bookie advertises, asked for after `add_address` whenever
    an add connection opens (None: assume this client's own range; an older bookie answers the hello
    with its version and the connection speaks that, transport.add_hello)."""

    def __init__(self, bookie_id: str, address: str, *, add_address: str | Callable[[], str] = "",
                 add_timeout_s: float = 10.0, rpc_timeout_s: float = 10.0, poller: AddPoller | None = None,
                 tls: TlsSettings | None = None, operator_secret: bytes | None = None,
                 wire_range: Callable[[], WireRange] | None = None):
        self.bookie_id = bookie_id
        # The pool's clients share one poller (one epoll set for all their add connections); a
        # client made on its own gets its own with its first add connection.
        self._own_poller = poller is None
        self.poller = poller
        self.address = address
        self._add_address = add_address
        self._wire_range = wire_range
        self.add_timeout_s = add_timeout_s
        self.rpc_timeout_s = rpc_timeout_s
        self._tls = tls
        self._ssl_context = tls.ssl_context() if tls is not None else None
        self._raw_channel = (grpc.secure_channel(address, tls.channel_credentials(), options=channel_options())
                             if tls is not None else grpc.insecure_channel(address, options=channel_options()))
        self._channel = with_operator_secret(self._raw_channel, operator_secret, encrypted=tls is not None)
        self._stub = pb_grpc.BookieStub(self._channel)
        # The add stream sends pre-serialized requests (see EncodedAddBatch).
        self._add_method = self._channel.stream_stream(
            ADD_METHOD, request_serializer=None, response_deserializer=pb.AddResponse.FromString)
        # Run-encoded reads parse their answer with the entries' bytes left in place.
        self._read_runs = self._channel.unary_unary(
            READ_METHOD, request_serializer=pb.ReadRequest.SerializeToString, response_deserializer=parse_run_response)
        self._reads = (ReadConnections(bookie_id, self._listener_address, self._ssl_context)
                       if read_connections_enabled() else None)
        self._stream: AddStream | None = None
        self._stream_lock = threading.Lock()
        self._closed = threading.Event()
        self._timer = threading.Thread(target=self._expire_loop, name=f"add-timer {bookie_id}", daemon=True)
        self._timer.start()

    def _listener_address(self) -> str:
        """The add listener's address now ("": none)."""
        lookup = self._add_address
        return lookup() if callable(lookup) else lookup

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
        send = self.submit_encoded(EncodedAddBatch(ledger, master_key, entries, recovery=recovery), callback,
                                   timeout_s=timeout_s)
        if send is not None:
            send()

    def submit_encoded(self, batch: EncodedAddBatch, callback: AddCallback, *, timeout_s: float | None = None,
                       on_stored: StoredCallback | None = None) -> Callable[[], None] | None:
        """Queue a batch already encoded (possibly shared with other bookies), and return the send
        the caller must run (soon: the stream waits for it) when the caller is the one to send it
        (AddStream.submit). on_stored: told a refused run's durable prefix (StoredCallback)."""
        stream = self._add_stream()
        return stream.submit(batch, callback, self.add_timeout_s if timeout_s is None else timeout_s,
                             on_stored=on_stored)

    def _add_stream(self) -> AddStream:
        stream = self._stream  # every add asks: no lock while the stream lives
        if stream is not None and not stream.dead and not self._closed.is_set():
            return stream
        with self._stream_lock:
            if self._closed.is_set():
                raise BookieUnavailableError(self.bookie_id, "client closed")
            if self._stream is None or self._stream.dead:
                add_address = self._listener_address()
                if add_address:
                    if self.poller is None:
                        self.poller = AddPoller(f"add-poller {self.bookie_id}")
                    self._stream = SocketAddStream(self.bookie_id, add_address, self.poller, self._ssl_context,
                                                   self._wire_range() if self._wire_range else None,
                                                   resend=self._resend)
                else:
                    advertised = self._wire_range() if self._wire_range else None
                    version = 1 if advertised is None else negotiate(OUR_RANGE, advertised)
                    self._stream = GrpcAddStream(self.bookie_id, self._add_method, version)
            return self._stream

    def _resend(self, adds: list[StreamedAdd]) -> None:
        """The bookie closed (or reset) an add connection that still owed these answers: an idle
        close crossing an add, usually (--idle-connection-timeout-s). Each goes once more, on a new
        connection, from a thread of its own (opening one must not hold up the poller that read the
        close); a bookie that is really gone fails them at the connect, as before."""
        threading.Thread(target=self._resend_now, args=(adds,), name=f"add-resend {self.bookie_id}",
                         daemon=True).start()

    def _resend_now(self, adds: list[StreamedAdd]) -> None:
        # All on one new stream: if that one dies too, the rest fail with it rather than each
        # going on whichever stream is current by then (a third connection for some, not others).
        stream: AddStream | None = None
        for i, add in enumerate(adds):
            add.resent = True
            try:
                stream = stream or self._add_stream()
                send = stream.submit(add.batch, add.callback, add.timeout_s, previous=add)
            except Exception as exc:  # every add not handed to a stream fails here, or it would hang
                if not isinstance(exc, BookieUnavailableError):
                    log.exception("resending adds failed bookie=%s", self.bookie_id)
                for failed in adds[i:]:
                    failed.callback(Status.INTERNAL_ERROR, f"transport: {exc}")
                return
            if send is not None:
                send()

    def _expire_loop(self) -> None:
        last = time.monotonic()
        while not self._closed.wait(_TIMER_INTERVAL_S):
            now = time.monotonic()
            overslept = now - last > _PAUSE_DETECT_S
            last = now
            if overslept:
                # The whole process was paused (this thread slept far past its interval): the
                # readers woke at the same moment and get one tick to read the answers that
                # arrived meanwhile before anything is judged late.
                continue
            stream = self._stream
            if stream is not None:
                stream.expire(now)

    def wire_version(self) -> int:
        """The wire version this client speaks with the bookie: what its open add connection
        settled, else the highest both support by the bookie's advertised range (for gRPC
        features a later version adds). WireVersionError when they share none."""
        stream = self._stream
        if isinstance(stream, SocketAddStream) and not stream.dead:
            return stream.wire_version
        advertised = self._wire_range() if self._wire_range else None
        return negotiate(OUR_RANGE, OUR_RANGE if advertised is None else advertised)

    # ---- unary calls --------------------------------------------------------------------------

    def _unary(self, method: Callable[..., _Response], request: object, timeout_s: float | None) -> _Response:
        # Fail fast (no wait_for_ready): a dead bookie must not stall failover. Channels retry a
        # restarted bookie every <= 300 ms, and readers make one more round after a pause.
        try:
            return method(request, timeout=timeout_s or self.rpc_timeout_s)
        except grpc.RpcError as exc:
            raise self._transport_error(exc) from None

    def _transport_error(self, exc: grpc.RpcError) -> BookieUnavailableError:
        details = exc.details() or ""
        if exc.code() in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED):
            return BookieRefusedError(self.bookie_id, f"{exc.code().name} {details}")
        message = f"{exc.code().name} {details}".strip() + grpc_failure_hint(details, self._tls)
        if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
            return BookieBusyError(self.bookie_id, message)
        return BookieUnavailableError(self.bookie_id, message)

    def read(
        self, ledger: LedgerKey, first: int, last: int, *, max_entries: int = 0, max_bytes: int = 0,
        fence: bool = False, master_key: bytes = b"", long_poll_min_lac: int | None = None,
        long_poll_timeout_ms: int = 0, timeout_s: float | None = None, entry_runs: bool = False,
    ) -> pb.ReadResponse:
        """entry_runs: answer with ReadResponse.runs (one buffer per run of consecutive OK
        entries; entry_ids/entry_status then list only the other entries), see bookie.proto."""
        req = pb.ReadRequest(
            ledger=ledger_ref(ledger), first_entry_id=first, last_entry_id=last, max_entries=max_entries,
            max_bytes=max_bytes, fence=fence, master_key=master_key, long_poll_timeout_ms=long_poll_timeout_ms,
            entry_runs=entry_runs,
        )
        if long_poll_min_lac is not None:
            req.long_poll_min_lac = long_poll_min_lac
            timeout_s = (timeout_s or self.rpc_timeout_s) + long_poll_timeout_ms / 1000
        return self._unary(self._stub.Read, req, timeout_s)

    def read_runs(self, ledger: LedgerKey, first: int, last: int, *, max_entries: int = 0, max_bytes: int = 0,
                  timeout_s: float | None = None, master_key: bytes = b"") -> RunResponse:
        """A range read answered in runs (ReadRequest.entry_runs), each run's data a zero-copy view
        of the received message (pyspark_ledger.transport.run_response): the bulk read path. Over
        a read connection where the bookie offers one, else over gRPC."""
        req = pb.ReadRequest(ledger=ledger_ref(ledger), first_entry_id=first, last_entry_id=last,
                             max_entries=max_entries, max_bytes=max_bytes, entry_runs=True, master_key=master_key)
        if self._reads is not None:
            resp = self._reads.read(req.SerializeToString(), timeout_s or self.rpc_timeout_s)
            if resp is not None:
                return resp
        return self._unary(self._read_runs, req, timeout_s)

    def read_connections(self) -> int:
        """Read connections open to the bookie now (0 when run reads go over gRPC)."""
        return 0 if self._reads is None else self._reads.connections()

    def read_connections_encrypted(self) -> bool:
        return self._reads is not None and self._reads.encrypted()

    def read_lac(self, ledger: LedgerKey, *, long_poll_min_lac: int | None = None, long_poll_timeout_ms: int = 0,
                 timeout_s: float | None = None, master_key: bytes = b"") -> pb.ReadLacResponse:
        req = pb.ReadLacRequest(ledger=ledger_ref(ledger), long_poll_timeout_ms=long_poll_timeout_ms,
                                master_key=master_key)
        if long_poll_min_lac is not None:
            req.long_poll_min_lac = long_poll_min_lac
            timeout_s = (timeout_s or self.rpc_timeout_s) + long_poll_timeout_ms / 1000
        return self._unary(self._stub.ReadLac, req, timeout_s)

    def write_lac(self, ledger: LedgerKey, master_key: bytes, lac: int, timeout_s: float | None = None) -> pb.WriteLacResponse:
        req = pb.WriteLacRequest(ledger=ledger_ref(ledger), master_key=master_key, lac=lac)
        return self._unary(self._stub.WriteLac, req, timeout_s)

    def fence(self, ledger: LedgerKey, master_key: bytes, timeout_s: float | None = None) -> pb.FenceResponse:
        return self._unary(self._stub.Fence, pb.FenceRequest(ledger=ledger_ref(ledger), master_key=master_key), timeout_s)

    def delete_ledger(self, ledger: LedgerKey, timeout_s: float | None = None, *,
                      master_key: bytes = b"") -> pb.DeleteLedgerResponse:
        """Authorized by `master_key` (the ledger's) or this client's operator secret."""
        req = pb.DeleteLedgerRequest(ledger=ledger_ref(ledger), master_key=master_key)
        return self._unary(self._stub.DeleteLedger, req, timeout_s)

    def ledger_key(self, ledger: LedgerKey, timeout_s: float | None = None) -> pb.LedgerKeyResponse:
        """The master key the bookie keeps for `ledger`: for this client's operator identity only."""
        return self._unary(self._stub.LedgerKey, pb.LedgerKeyRequest(ledger=ledger_ref(ledger)), timeout_s)

    def storage_stats(self, timeout_s: float | None = None) -> pb.StorageStatsResponse:
        """Admin (ledger bookieinfo): needs the operator identity once the bookie has one."""
        return self._unary(self._stub.StorageStats, pb.StorageStatsRequest(), timeout_s)

    def trigger_gc(self, timeout_s: float) -> Iterator[pb.GcProgress]:
        """Admin (ledger triggergc): GC and compaction now, as a progress stream."""
        try:
            yield from self._stub.TriggerGc(pb.TriggerGcRequest(), timeout=timeout_s)
        except grpc.RpcError as exc:
            raise self._transport_error(exc) from None

    def info(self, timeout_s: float | None = None) -> pb.InfoResponse:
        return self._unary(self._stub.Info, pb.InfoRequest(), timeout_s)

    def wait_ready(self, timeout_s: float) -> None:
        try:
            grpc.channel_ready_future(self._raw_channel).result(timeout=timeout_s)
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
        if self._reads is not None:
            self._reads.close()
        self._channel.close()
        self._timer.join(timeout=1)
        if self._own_poller and self.poller is not None:
            self.poller.close()

    def __enter__(self) -> BookieClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
