"""The add transport's framing (bookie.proto.add_framing), over local socket pairs."""

from __future__ import annotations

import random
import socket
import struct
import threading

import pytest

from bookie.add_handler import AddOutcome, encode_add_response
from bookie.proto import add_framing
from bookie.proto import bookie_pb2 as pb
from bookie.proto.add_framing import (
    FRAME_BYTES_MAX,
    HELLO_BYTES,
    MAGIC,
    FrameReader,
    FramingError,
    frame,
    hello,
    parse_hello,
    set_keepalive,
    set_send_timeout,
    split_frames,
)
from bookie.status import Status


def header(size: int) -> bytes:
    return struct.pack(">I", size)


def test_hello_round_trip() -> None:
    assert HELLO_BYTES == 8 and hello(1) == b"PLAD\x00\x00\x00\x01"  # what release 0.1.0 sends
    assert parse_hello(hello(1)) == 1
    # Another version is still a hello: the listener answers it with its own highest and closes.
    assert parse_hello(MAGIC + struct.pack(">I", 2)) == 2
    assert parse_hello(MAGIC + b"\xff\xff\xff\xff") == 2**32 - 1


@pytest.mark.parametrize("data", [
    b"GET / HT",  # an HTTP client
    b"PRI * HT",  # an HTTP/2 (gRPC) client on the wrong port
    b"plad\x00\x00\x00\x01",  # magic is case-sensitive
    hello(1)[:7],  # short
    b"",  # the peer closed at once
    hello(1) + b"\x00",  # long
])
def test_a_hello_with_the_wrong_magic_or_length_is_refused(data: bytes) -> None:
    with pytest.raises(FramingError, match="not an add-transport hello"):
        parse_hello(data)


def reader_of(data: bytes) -> FrameReader:
    """A FrameReader over a socket whose peer sent `data` and closed."""
    ours, theirs = socket.socketpair()
    theirs.sendall(data)
    theirs.close()
    return FrameReader(ours)


def test_frames_round_trip_through_a_socket() -> None:
    frames = reader_of(frame([b"ab", b"cd"]) + frame([b""]) + frame([]) + frame([b"xyz" * 1000]))
    assert frames.read() == b"abcd"  # body parts concatenate into one body
    assert frames.read() == b""
    assert frames.read() == b""
    assert frames.read() == b"xyz" * 1000
    assert frames.read() is None  # a clean end, between frames
    assert frame([b"abc"]) == b"\x00\x00\x00\x03abc"


def test_a_frame_larger_than_one_read_arrives_whole_across_many_sends() -> None:
    ours, theirs = socket.socketpair()
    big = bytes(range(256)) * 8192  # 2 MiB: many reads' worth
    data = frame([b"small"]) + frame([big]) + frame([b"after"])

    def send_slowly() -> None:
        for i in range(0, len(data), 100_003):
            theirs.sendall(data[i:i + 100_003])
        theirs.close()

    sender = threading.Thread(target=send_slowly)
    sender.start()
    frames = FrameReader(ours, recv_bytes=4096)
    assert frames.read() == b"small"
    assert bytes(frames.read()) == big
    assert frames.read() == b"after"
    assert frames.read() is None
    sender.join()


def test_split_frames_keeps_an_incomplete_frame_for_later() -> None:
    data = frame([b"one"]) + frame([b"two"]) + frame([b"three"])[:6]
    bodies, used = split_frames(data)
    assert bodies == [b"one", b"two"] and data[used:] == frame([b"three"])[:6]
    assert split_frames(b"\x00\x00") == ([], 0)


def test_a_clean_end_is_none() -> None:
    assert reader_of(b"").read() is None


def test_a_stream_that_ends_inside_the_header_is_refused() -> None:
    with pytest.raises(FramingError, match=r"inside a frame \(2 bytes of it\)"):
        reader_of(b"\x00\x00").read()


def test_a_stream_that_ends_inside_the_body_is_refused() -> None:
    with pytest.raises(FramingError, match=r"inside a frame \(3 of 10 bytes\)"):
        reader_of(header(10) + b"abc").read()
    # An empty body where one was announced is truncated too, not a clean end.
    with pytest.raises(FramingError, match=r"\(0 of 1 bytes\)"):
        reader_of(header(1)).read()


@pytest.mark.parametrize("size", [FRAME_BYTES_MAX + 1, 2**32 - 1])
def test_a_header_over_the_limit_is_refused_before_the_body_is_read(size: int) -> None:
    with pytest.raises(FramingError, match=f"a frame of {size} bytes exceeds the limit of {FRAME_BYTES_MAX}"):
        reader_of(header(size) + b"body bytes that must stay unread").read()
    with pytest.raises(FramingError, match="exceeds"):
        split_frames(header(size))


def test_a_header_of_exactly_the_limit_is_accepted() -> None:
    # Only the (missing) body is wrong here: the size itself is allowed.
    with pytest.raises(FramingError, match=f"inside a frame \\(0 of {FRAME_BYTES_MAX} bytes\\)"):
        reader_of(header(FRAME_BYTES_MAX)).read()


def test_frame_refuses_a_body_over_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(add_framing, "FRAME_BYTES_MAX", 10)
    assert frame([b"x" * 6, b"y" * 4]) == header(10) + b"x" * 6 + b"y" * 4
    with pytest.raises(FramingError, match="a frame of 11 bytes exceeds the limit of 10"):
        frame([b"x" * 6, b"y" * 5])
    # The reader enforces the same (patched) limit.
    assert reader_of(header(10) + b"z" * 10).read() == b"z" * 10
    with pytest.raises(FramingError, match="exceeds"):
        reader_of(header(11) + b"z" * 11).read()


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


def test_add_responses_are_encoded_byte_for_byte_as_protobuf_would() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        outcomes = [AddOutcome(rng.choice([0, 1, 127, 128, 300, 2**40, 2**64 - 1]), rng.choice(list(Status)),
                               rng.choice(["", "x", "not durable within 30 s", "é" * 100]))
                    for _ in range(rng.randint(0, 4))]
        expected = pb.AddResponse(results=[pb.AddResult(request_id=o.request_id, status=int(o.status), message=o.message)
                                           for o in outcomes]).SerializeToString()
        assert encode_add_response(outcomes) == expected, outcomes
