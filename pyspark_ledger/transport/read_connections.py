"""Run reads over plain TCP: a client's read connections to one bookie (bookie/read_connection.py).

A range read for Spark moves tens of MiB per answer; through gRPC Python each answer is copied
about three times in the reader (and gRPC's threads wake for it). Here an answer is received
with recv_into straight into one buffer (numpy's uninitialised one: nothing zeroed), and parsed
as views of it (transport/run_response.py): the kernel's copy is the only one.

A connection carries one read at a time; a read takes an idle connection (or opens one, up to
OPEN_MAX at once) and gives it back after the answer (IDLE_MAX kept). Reads fall back to gRPC
(`read` answers None) when the bookie has no add listener, refuses the read hello (a bookie of
an earlier release: not asked again for NOT_OFFERED_RETRY_S), cannot be reached (not tried again
for UNREACHABLE_RETRY_S: gRPC then says why), when OPEN_MAX reads are in flight already, when it
answers UNAUTHORIZED (a connection carries no operator secret; gRPC does), or when
LEDGER_READ_CONNECTIONS=0. A connection that breaks during a read (the bookie died, or the answer
is truncated or malformed) is closed and the read fails with BookieUnavailableError naming the
problem, so the ledger room's run reads fail over to the next replica as with gRPC; a connection
that was idle and turns out closed by the bookie (its idle timeout) is replaced once first.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable

import numpy as np

from bookie.proto.add_framing import (
    FRAME_BYTES_MAX,
    FRAME_HEADER,
    HELLO_BYTES,
    READ_MAGIC,
    FramingError,
    frame_header,
    hello,
    parse_hello,
    prepare_socket,
    recv_exactly,
)
from bookie.proto.versions import OUR_RANGE
from bookie.status import Status
from pyspark_ledger.errors import BookieUnavailableError, PySparkLedgerError
from pyspark_ledger.transport.run_response import MalformedResponse, RunResponse, parse_run_response
from pyspark_ledger.transport.tls_socket import describe_tls_failure

log = logging.getLogger(__name__)

READ_CONNECTIONS_ENV = "LEDGER_READ_CONNECTIONS"  # "0": run reads over gRPC only
IDLE_MAX = 4  # connections kept open between reads, per bookie
OPEN_MAX = 8  # connections at once, per bookie: reads beyond them go over gRPC
CONNECT_TIMEOUT_S = 5.0  # TCP connect plus the hello exchange
NOT_OFFERED_RETRY_S = 60.0
UNREACHABLE_RETRY_S = 1.0


class NotOffered(PySparkLedgerError):
    """The bookie serves no read connections (no listener, or it refused the read hello)."""


def read_connections_enabled() -> bool:
    return os.environ.get(READ_CONNECTIONS_ENV, "1") != "0"


def _set_timeout(sock: socket.socket, seconds: float) -> None:
    """Bound every receive and send of a read. A plain socket stays blocking with the kernel's
    SO_RCVTIMEO / SO_SNDTIMEO (so a whole answer is one recv with MSG_WAITALL, no poll per
    piece); CPython's ssl needs a socket timeout instead."""
    if isinstance(sock, ssl.SSLSocket):
        sock.settimeout(seconds)
        return
    whole = int(seconds)
    value = struct.pack("ll", whole, int((seconds - whole) * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)


def _recv_into(sock: socket.socket, view: memoryview) -> int:
    """Fill `view` from the socket: the bytes received (fewer only if the peer closed first)."""
    have, size = 0, len(view)
    flags = 0 if isinstance(sock, ssl.SSLSocket) else socket.MSG_WAITALL  # ssl takes no flags
    while have < size:  # each pass receives at least one byte, or ends
        n = sock.recv_into(view[have:], size - have, flags)
        if n == 0:
            break
        have += n
    return have


def exchange(sock: socket.socket, request: bytes, timeout_s: float) -> RunResponse:
    """Send one serialized ReadRequest and receive its answer, parsed as views of one buffer.
    FramingError for an answer over the frame limit, truncated, or malformed; OSError for a
    connection that fails (TimeoutError / BlockingIOError past timeout_s)."""
    _set_timeout(sock, timeout_s)
    sock.sendall(frame_header(len(request)) + request)
    header = memoryview(bytearray(FRAME_HEADER.size))
    got = _recv_into(sock, header)
    if got != FRAME_HEADER.size:
        raise FramingError("the connection ended before the answer" if got == 0 else
                           f"the connection ended inside an answer's header ({got} of {FRAME_HEADER.size} bytes)")
    (size,) = FRAME_HEADER.unpack(header)
    if size > FRAME_BYTES_MAX:
        raise FramingError(f"an answer of {size} bytes exceeds the frame limit of {FRAME_BYTES_MAX}")
    body = np.empty(size, dtype=np.uint8).data.cast("B")  # uninitialised: every byte is received into
    got = _recv_into(sock, body)
    if got != size:
        raise FramingError(f"the connection ended inside an answer ({got} of {size} bytes)")
    try:
        return parse_run_response(body)
    except MalformedResponse as exc:
        raise FramingError(f"a malformed answer of {size} bytes: {exc}") from None


def open_read_connection(address: str, ssl_context: ssl.SSLContext | None) -> socket.socket:
    """A read connection to the listener at `address` after the hello. NotOffered when the
    bookie closes at the hello or answers another hello (it does not serve reads), OSError or
    ssl.SSLError when it cannot be reached. A bookie whose highest wire version is lower than
    ours answers with it; any version carries the same read frames, so we ask again for it."""
    sock, answered = _hello(address, ssl_context, OUR_RANGE.high)
    if answered == OUR_RANGE.high:
        return sock
    sock.close()  # the bookie closes its side too
    if answered not in OUR_RANGE:
        raise NotOffered(f"the bookie speaks wire version {answered}, this client {OUR_RANGE}")
    sock, again = _hello(address, ssl_context, answered)
    if again != answered:
        sock.close()
        raise NotOffered(f"the bookie refused read connections of wire version {answered}")
    return sock


def _hello(address: str, ssl_context: ssl.SSLContext | None, version: int) -> tuple[socket.socket, int]:
    """Connect and exchange read hellos asking for `version`: the socket and the version answered."""
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S)
    try:
        prepare_socket(sock)
        if ssl_context is not None:
            sock = ssl_context.wrap_socket(sock, server_hostname=host.strip("[]"))
        sock.sendall(hello(version, READ_MAGIC))
        reply = recv_exactly(sock, HELLO_BYTES)
        try:
            answered = parse_hello(reply, READ_MAGIC)
        except FramingError:
            raise NotOffered(f"the bookie answered the read hello with {reply!r}") from None
        sock.settimeout(None)
        return sock, answered
    except BaseException:
        sock.close()
        raise


class ReadConnections:
    """One bookie's read connections (see the module doc). Thread-safe."""

    def __init__(self, bookie_id: str, address: Callable[[], str], ssl_context: ssl.SSLContext | None):
        self.bookie_id = bookie_id
        self._address = address  # the add listener's, looked up when a connection opens ("": none)
        self._ssl_context = ssl_context
        self._lock = threading.Lock()
        self._idle: list[socket.socket] = []
        self._open = 0  # connections that exist: idle ones and those carrying a read
        self._not_before = 0.0  # no new connection before this (monotonic)
        self._pid = os.getpid()
        self._closed = False

    def read(self, request: bytes, timeout_s: float) -> RunResponse | None:
        """The answer to one serialized run ReadRequest, or None: read it over gRPC instead.
        BookieUnavailableError when the connection fails during the read."""
        sock, reused = self._take()
        if sock is None:
            return None
        for attempt in range(2):
            try:
                resp = exchange(sock, request, timeout_s)
            except (OSError, FramingError) as exc:
                self._drop(sock)
                if reused and attempt == 0:  # perhaps closed while idle: once on a new connection
                    sock, reused = self._take(fresh=True)
                    if sock is None:
                        return None
                    continue
                raise BookieUnavailableError(self.bookie_id, f"read connection: {exc}") from None
            self._give_back(sock)
            return None if resp.status == Status.UNAUTHORIZED else resp
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _take(self, fresh: bool = False) -> tuple[socket.socket | None, bool]:
        """A connection for one read (idle if any, unless `fresh`) and whether it was idle; None
        when there is none to be had now."""
        with self._lock:
            if self._pid != os.getpid():  # a forked child: the parent's connections are not ours
                self._idle, self._open, self._pid = [], 0, os.getpid()
            if self._closed:
                return None, False
            if self._idle and not fresh:
                return self._idle.pop(), True
            if self._open >= OPEN_MAX or time.monotonic() < self._not_before:
                return None, False
            self._open += 1
        try:
            return self._connect(), False
        except BaseException:
            with self._lock:
                self._open -= 1
            raise

    def _connect(self) -> socket.socket | None:
        address = self._address()
        problem, pause = "", UNREACHABLE_RETRY_S
        if not address:
            problem, pause = "no add listener", NOT_OFFERED_RETRY_S
        else:
            try:
                return open_read_connection(address, self._ssl_context)
            except NotOffered as exc:
                problem, pause = str(exc), NOT_OFFERED_RETRY_S
            except ssl.SSLError as exc:
                problem = describe_tls_failure(exc)
            except (OSError, ValueError) as exc:
                problem = str(exc)
        log.info("run reads over gRPC bookie=%s address=%s for_s=%g reason=%s", self.bookie_id, address or "none",
                 pause, problem)
        with self._lock:
            self._open -= 1
            self._not_before = time.monotonic() + pause
        return None

    def _give_back(self, sock: socket.socket) -> None:
        with self._lock:
            if not self._closed and self._pid == os.getpid() and len(self._idle) < IDLE_MAX:
                self._idle.append(sock)
                return
            if self._pid == os.getpid():
                self._open -= 1
        sock.close()

    def _drop(self, sock: socket.socket) -> None:
        with self._lock:
            if self._pid == os.getpid():
                self._open -= 1
        sock.close()

    def connections(self) -> int:
        """The connections open now (idle, or carrying a read)."""
        with self._lock:
            return self._open if self._pid == os.getpid() else 0

    def encrypted(self) -> bool:
        """Whether the idle connections are TLS ones (False when there are none)."""
        with self._lock:
            return bool(self._idle) and all(isinstance(s, ssl.SSLSocket) for s in self._idle)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            self._open -= len(idle)
        for sock in idle:
            sock.close()
