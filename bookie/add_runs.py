"""An AddRequest frame parsed with each run's body left where it arrived (a view of the frame).

Why: protobuf (upb) copies a `bytes` field into its arena when it parses, and again into a new
Python bytes object each time the field is read, so a run of 2 MiB would be copied twice before
the journal sees it (measured: about 11% of a bookie's CPU per MB of large entries). Here the
frame's top-level fields are walked in Python: each AddBatch's `run_body` (field 9) is cut out
and kept as a view, and the rest of the message, a few dozen bytes per batch, is parsed by
protobuf as before. The walk costs a handful of steps per batch field, never per entry: a
batch of separate entries (`entries`, field 7, wire version 1) is left whole to protobuf at its
first entry. Anything unexpected (a field of an unknown wire type, a length past the end) falls
back to protobuf's parse of the whole frame, which accepts or refuses it exactly as before.
"""

from __future__ import annotations

from bookie.errors import BookieError
from bookie.proto import bookie_pb2 as pb
from bookie.proto.wire import encode_varint
from bookie.storage.errors import ensure

_BATCHES = (1 << 3) | 2  # AddRequest.batches, length-delimited
_ENTRIES = 7  # AddBatch.entries: a batch of separate entries, left to protobuf whole
_RUN_BODY = (9 << 3) | 2  # AddBatch.run_body, length-delimited
_FIELDS_MAX = 64  # fields walked per batch before it is left to protobuf (a batch has about 8)
# Frames smaller than this are parsed by protobuf alone: the walk's fixed cost (about 15-20 us
# per request in Python on the 2-core VM under load, against 1.3 us for protobuf's parse of a
# 1 KiB add) is what the two copies of a ~128 KiB body cost (measured side by side, 2026-11-28).
SPLIT_FRAME_BYTES_MIN = 128 * 1024


class _Unexpected(BookieError):
    """Not a frame this walk understands: protobuf parses it whole instead."""


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    if pos < len(buf) and buf[pos] < 0x80:
        return buf[pos], pos + 1  # one byte: keys, and most lengths of the small fields
    value = shift = 0
    for _ in range(10):
        if pos >= len(buf):
            raise _Unexpected
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise _Unexpected


def _skip(buf: memoryview, pos: int, key: int) -> int:
    """The position after the value of a field with `key` starting at `pos`."""
    wire_type = key & 7
    if wire_type == 0:
        return _varint(buf, pos)[1]
    if wire_type == 2:
        size, pos = _varint(buf, pos)
        end = pos + size
    elif wire_type == 1:
        end = pos + 8
    elif wire_type == 5:
        end = pos + 4
    else:
        raise _Unexpected  # groups: never in this message
    if end > len(buf):
        raise _Unexpected
    return end


def _cut_run_body(batch: memoryview) -> tuple[bytes, memoryview | None]:
    """The batch's bytes without its run_body field, and that field's value (the last one, as
    protobuf takes it), or (the batch whole, None) when it has no run body to cut."""
    kept: list[memoryview] = []
    body: memoryview | None = None
    pos = start = 0
    for _ in range(_FIELDS_MAX):
        if pos >= len(batch):
            break
        key, value_at = _varint(batch, pos)
        if key >> 3 == _ENTRIES:
            return bytes(batch), None  # separate entries: protobuf takes the batch whole
        end = _skip(batch, value_at, key)
        if key == _RUN_BODY:
            kept.append(batch[start:pos])
            body = batch[_varint(batch, value_at)[1]:end]
            start = end
        pos = end
    else:
        return bytes(batch), None  # more fields than a run batch has
    if body is None:
        return bytes(batch), None
    kept.append(batch[start:])
    return b"".join(kept), body


def parse_add_request(frame: bytes | bytearray | memoryview) -> tuple[pb.AddRequest, list[memoryview | None]]:
    """The AddRequest in `frame` and, per batch, its run body as a view of `frame` (None: read
    the batch's own fields). Raises protobuf's DecodeError for a frame that is not an AddRequest."""
    if len(frame) < SPLIT_FRAME_BYTES_MIN:
        request = pb.AddRequest.FromString(frame)
        return request, [None] * len(request.batches)
    view = memoryview(frame).cast("B")
    try:
        parts: list[bytes] = []
        bodies: list[memoryview | None] = []
        pos = 0
        while pos < len(view):
            key, pos = _varint(view, pos)
            if key != _BATCHES:
                raise _Unexpected
            size, pos = _varint(view, pos)
            if pos + size > len(view):
                raise _Unexpected
            rest, body = _cut_run_body(view[pos:pos + size])
            pos += size
            parts += (b"\x0a", encode_varint(len(rest)), rest)
            bodies.append(body)
    except _Unexpected:
        request = pb.AddRequest.FromString(frame)
        return request, [None] * len(request.batches)
    request = pb.AddRequest.FromString(b"".join(parts))
    ensure(len(request.batches) == len(bodies), "one parsed batch per batch field walked")
    return request, bodies
