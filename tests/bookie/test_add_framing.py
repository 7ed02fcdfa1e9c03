"""The add transport's framing (bookie.proto.add_framing): pure, no sockets but one for an option."""

from __future__ import annotations

import io
import socket
import struct

import pytest

from bookie.proto import add_framing
from bookie.proto.add_framing import (
    FRAME_BYTES_MAX,
    FRAME_HEADER,
    HELLO,
    HELLO_BYTES,
    MAGIC,
    VERSION,
    FramingError,
    frame,
    parse_hello,
    read_frame,
    set_keepalive,
    set_send_timeout,
)


def header(size: int) -> bytes:
    return struct.pack(">I", size)


def test_hello_round_trip() -> None:
    assert HELLO_BYTES == 8 and HELLO == b"PLAD\x00\x00\x00\x01"
    assert parse_hello(HELLO) == VERSION == 1
    # Another version is still a hello: the listener answers it with its own and closes.
    assert parse_hello(MAGIC + struct.pack(">I", 2)) == 2
    assert parse_hello(MAGIC + b"\xff\xff\xff\xff") == 2**32 - 1


@pytest.mark.parametrize("data", [
    b"GET / HT",  # an HTTP client
    b"PRI * HT",  # an HTTP/2 (gRPC) client on the wrong port
    b"plad\x00\x00\x00\x01",  # magic is case-sensitive
    HELLO[:7],  # short
    b"",  # the peer closed at once
    HELLO + b"\x00",  # long
])
def test_a_hello_with_the_wrong_magic_or_length_is_refused(data: bytes) -> None:
    with pytest.raises(FramingError, match="not an add-transport hello"):
        parse_hello(data)


def test_frames_round_trip_through_a_stream() -> None:
    stream = io.BytesIO(frame([b"ab", b"cd"]) + frame([b""]) + frame([]) + frame([b"xyz" * 1000]))
    assert read_frame(stream) == b"abcd"  # body parts concatenate into one body
    assert read_frame(stream) == b""
    assert read_frame(stream) == b""
    assert read_frame(stream) == b"xyz" * 1000
    assert read_frame(stream) is None  # a clean end, between frames
    assert frame([b"abc"]) == b"\x00\x00\x00\x03abc"


def test_read_frame_returns_none_at_a_clean_end() -> None:
    assert read_frame(io.BytesIO(b"")) is None


def test_read_frame_refuses_a_stream_that_ends_inside_the_header() -> None:
    with pytest.raises(FramingError, match="inside a frame header"):
        read_frame(io.BytesIO(b"\x00\x00"))


def test_read_frame_refuses_a_stream_that_ends_inside_the_body() -> None:
    stream = io.BytesIO(header(10) + b"abc")
    with pytest.raises(FramingError, match=r"inside a frame \(3 of 10 bytes\)"):
        read_frame(stream)
    # An empty body where one was announced is truncated too, not a clean end.
    with pytest.raises(FramingError, match=r"\(0 of 1 bytes\)"):
        read_frame(io.BytesIO(header(1)))


@pytest.mark.parametrize("size", [FRAME_BYTES_MAX + 1, 2**32 - 1])
def test_read_frame_refuses_a_header_over_the_limit_before_reading_the_body(size: int) -> None:
    stream = io.BytesIO(header(size) + b"body bytes that must stay unread")
    with pytest.raises(FramingError, match=f"a frame of {size} bytes exceeds the limit of {FRAME_BYTES_MAX}"):
        read_frame(stream)
    assert stream.tell() == FRAME_HEADER.size


def test_read_frame_accepts_a_header_of_exactly_the_limit() -> None:
    # Only the (missing) body is wrong here: the size itself is allowed.
    with pytest.raises(FramingError, match=f"inside a frame \\(0 of {FRAME_BYTES_MAX} bytes\\)"):
        read_frame(io.BytesIO(header(FRAME_BYTES_MAX)))


def test_frame_refuses_a_body_over_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(add_framing, "FRAME_BYTES_MAX", 10)
    assert frame([b"x" * 6, b"y" * 4]) == header(10) + b"x" * 6 + b"y" * 4
    with pytest.raises(FramingError, match="a frame of 11 bytes exceeds the limit of 10"):
        frame([b"x" * 6, b"y" * 5])
    # The reader enforces the same (patched) limit.
    assert read_frame(io.BytesIO(header(10) + b"z" * 10)) == b"z" * 10
    with pytest.raises(FramingError, match="exceeds"):
        read_frame(io.BytesIO(header(11) + b"z" * 11))


def test_set_send_timeout_bounds_sends_and_leaves_receives_blocking() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        set_send_timeout(s, 1.5)
        assert struct.unpack("ll", s.getsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, 16)) == (1, 500_000)
        assert struct.unpack("ll", s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, 16)) == (0, 0)
        assert s.gettimeout() is None  # Python-level blocking mode untouched


def test_set_keepalive_notices_a_silent_peer_in_seconds_not_hours() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        set_keepalive(s)
        assert s.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == add_framing.KEEPALIVE_IDLE_S
        assert s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == add_framing.KEEPALIVE_INTERVAL_S
        assert s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == add_framing.KEEPALIVE_PROBES
    assert add_framing.KEEPALIVE_IDLE_S + add_framing.KEEPALIVE_PROBES * add_framing.KEEPALIVE_INTERVAL_S <= 30
