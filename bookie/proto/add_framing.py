"""Framing of the plain-TCP add transport (docs/add-transport.md), shared by bookie and client.

A connection opens with an 8-byte hello each way (magic, then a wire version as a big-endian
u32, bookie/proto/versions.py): the client's names the version it asks for, the highest both
sides support by the bookie's advertised range; the bookie's echoes it when the bookie speaks it,
else names the bookie's highest and the bookie closes. After it, each side sends frames: a
big-endian u32 body length, then the body, a serialized bookie.proto AddRequest (client to
bookie) or AddResponse (bookie to client). The bookie answers every request with exactly one
response, in order. The messages are the gRPC Add stream's; only gRPC's framing, HTTP/2 and its
threads are left out, which is most of an add's latency in Python (see
bench/grpc_transport_bench.py).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Sequence

import numpy as np

from bookie.errors import BookieError

MAGIC = b"PLAD"
# The hello of a read connection (docs/add-transport.md, "Read connections"): the same listener,
# frames of bookie.proto ReadRequest (run reads) and their ReadResponse answers instead.
READ_MAGIC = b"PLRD"
HELLO_BYTES = 8
FRAME_HEADER = struct.Struct(">I")
# A frame's body is at most this large (the gRPC message limit both sides already use).
FRAME_BYTES_MAX = 64 * 2**20
# One read from an add connection. Kept under malloc's mmap threshold (128 KiB): a bigger buffer
# is mapped and unmapped on every read, page faults and all.
RECV_BYTES = 64 * 1024


class FramingError(BookieError):
    """The peer broke the framing: the connection cannot be resynchronised and must close."""


def hello(version: int, magic: bytes = MAGIC) -> bytes:
    """The hello that asks for (client) or accepts (bookie) wire version `version`, on an add
    connection (MAGIC) or a read connection (READ_MAGIC)."""
    assert magic in (MAGIC, READ_MAGIC), f"unknown hello magic {magic!r}"
    return magic + struct.pack(">I", version)


def parse_hello(data: bytes, magic: bytes = MAGIC) -> int:
    """The protocol version a peer's hello of kind `magic` announces (FramingError if it is not one)."""
    if len(data) != HELLO_BYTES or data[:4] != magic:
        kind = "a read-connection" if magic == READ_MAGIC else "an add-transport"
        raise FramingError(f"not {kind} hello: {data[:HELLO_BYTES]!r}")
    return int(struct.unpack_from(">I", data, 4)[0])


def frame(body_parts: list[bytes]) -> bytes:
    """One frame of the concatenation of body_parts (a serialized message, or the frames of
    several AddRequest.batches elements, which concatenate into one AddRequest)."""
    return b"".join([frame_header(sum(map(len, body_parts))), *body_parts])


def frame_header(size: int) -> bytes:
    """The header of a frame whose body is `size` bytes (FramingError over the limit)."""
    if size > FRAME_BYTES_MAX:
        raise FramingError(f"a frame of {size} bytes exceeds the limit of {FRAME_BYTES_MAX}")
    return FRAME_HEADER.pack(size)


# Buffers per sendmsg call (Linux's IOV_MAX is 1024).
SEND_BUFFERS_MAX = 512
# Frames under this size are joined and sent with sendall: copying a few KiB costs less than
# building the scatter-gather list.
SEND_JOINED_BYTES_MAX = 64 * 1024


def sendall_parts(sock: socket.socket, parts: Sequence[bytes | memoryview]) -> None:
    """sendall of the parts' concatenation with scatter-gather sends, never joining them: a
    frame of large entries goes out from the entries' own buffers. Blocking socket (a stalled
    send fails after its SO_SNDTIMEO, as sendall does)."""
    if len(parts) == 1 or sum(map(len, parts)) < SEND_JOINED_BYTES_MAX:
        sock.sendall(parts[0] if len(parts) == 1 else b"".join(parts))  # a small frame: one plain send
        return
    todo: list[bytes | memoryview] = [p for p in parts if len(p)]
    at = 0
    for _ in range(sum(map(len, todo)) + 1):  # each send moves at least one byte
        if at == len(todo):
            return
        sent = sock.sendmsg(todo[at:at + SEND_BUFFERS_MAX])
        while at < len(todo) and sent >= len(todo[at]):
            sent -= len(todo[at])
            at += 1
        if sent:
            todo[at] = memoryview(todo[at])[sent:]
    raise FramingError("a send made no progress")


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    """n bytes, or fewer if the peer closes first; unbuffered, so nothing after them is consumed
    (the hello exchange, before frames start)."""
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


class FrameReader:
    """Frame bodies from a blocking socket: one recv per frame while frames are small (a read
    takes whatever arrived, often several frames), and a frame larger than what arrived is read
    to its exact end in place, never by re-joining what has arrived so far."""

    def __init__(self, sock: socket.socket, recv_bytes: int = RECV_BYTES):
        self._sock = sock
        self._recv_bytes = recv_bytes
        self._bodies: list[bytes] = []
        self._next = 0
        self._rest = b""  # the start of a frame not complete yet

    def read(self) -> bytes | memoryview | None:
        """The next frame's body; None at a clean end of stream (between frames). FramingError
        for a frame over the limit or a stream that ends inside a frame."""
        while self._next >= len(self._bodies):
            data = self._sock.recv(self._recv_bytes)
            if not data:
                if self._rest:
                    raise FramingError(f"the connection ended inside a frame ({len(self._rest)} bytes of it)")
                return None
            if self._rest:
                data = self._rest + data  # the rest is under a header's size, or one recv's worth
            self._bodies, used = split_frames(data)
            self._next = 0
            self._rest = data[used:]
            if not self._bodies and len(self._rest) >= FRAME_HEADER.size:
                return self._read_large()
        body = self._bodies[self._next]
        self._next += 1
        return body

    def _read_large(self) -> memoryview:
        """The frame whose start is in `_rest` and whose body did not arrive whole: read exactly
        its remaining bytes into one buffer. The buffer is numpy's uninitialised one: a
        bytearray would first be zeroed, a pass over every byte for nothing (2.5% of a bookie's
        CPU on 2 MiB entries)."""
        (size,) = FRAME_HEADER.unpack_from(self._rest)
        view = np.empty(size, dtype=np.uint8).data.cast("B")
        have = len(self._rest) - FRAME_HEADER.size
        view[:have] = self._rest[FRAME_HEADER.size:]
        self._rest = b""
        while have < size:
            n = self._sock.recv_into(view[have:], size - have)
            if n == 0:
                raise FramingError(f"the connection ended inside a frame ({have} of {size} bytes)")
            have += n
        return view


def split_frames(data: bytes, start: int = 0) -> tuple[list[bytes], int]:
    """The bodies of the complete frames in data[start:], and the offset where the first
    incomplete frame begins (len(data) if none). For readers that take whatever bytes arrived
    (a non-blocking socket): keep data[offset:] and prepend it to the next bytes. FramingError
    for a frame over the limit."""
    bodies: list[bytes] = []
    pos, end = start, len(data)
    header = FRAME_HEADER.size
    while end - pos >= header:
        (size,) = FRAME_HEADER.unpack_from(data, pos)
        if size > FRAME_BYTES_MAX:
            raise FramingError(f"a frame of {size} bytes exceeds the limit of {FRAME_BYTES_MAX}")
        if end - pos - header < size:
            break
        pos += header
        bodies.append(data[pos:pos + size])
        pos += size
    return bodies, pos


# Either side drops a connection whose peer stops reading for this long (one send blocked).
SEND_TIMEOUT_S = 30.0


def prepare_socket(sock: socket.socket) -> None:
    """Both ends, at connect: no Nagle delay on small frames, and keepalive (set_keepalive)."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    set_keepalive(sock)


def start_frames(sock: socket.socket) -> None:
    """Both ends, after the hello: receives block (shutdown wakes them; an idle connection waits
    for answers indefinitely), a send blocks for at most SEND_TIMEOUT_S."""
    sock.settimeout(None)
    set_send_timeout(sock, SEND_TIMEOUT_S)


def set_send_timeout(sock: socket.socket, seconds: float) -> None:
    """Bound blocking sends at the OS level (SO_SNDTIMEO), leaving receives blocking: a Python
    socket timeout would bound both, and an idle connection waits for answers indefinitely
    (keepalive and the add timeouts notice a dead peer)."""
    whole = int(seconds)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", whole, int((seconds - whole) * 1e6)))


# A peer that vanished without closing (a crashed host, a cut network) is noticed after about
# KEEPALIVE_IDLE_S + KEEPALIVE_PROBES * KEEPALIVE_INTERVAL_S of silence, like the gRPC channels'
# 10 s keepalive, instead of the kernel's default of two hours: a bookie's connection threads,
# and a client's receivers, never wait on a dead peer for long.
KEEPALIVE_IDLE_S = 10
KEEPALIVE_INTERVAL_S = 5
KEEPALIVE_PROBES = 3


def set_keepalive(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", KEEPALIVE_IDLE_S), ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL_S),
                        ("TCP_KEEPCNT", KEEPALIVE_PROBES)):
        option = getattr(socket, name, None)  # Linux; elsewhere the system's defaults apply
        if option is not None:
            sock.setsockopt(socket.IPPROTO_TCP, option, value)
