"""An AddRequest frame parsed with each run's body left where it arrived (a view of the frame).

Why: protobuf (upb) copies a `bytes` field into its arena when it parses, and again into a new
Python bytes object each time the field is read, so a run of 2 MiB would be copied twice before
the journal sees it (measured: about 11% of a bookie's CPU per MB of large entries). Here the
frame's top-level fields are walked in Python: each AddBatch's `run_body` (field 9) is cut out
and kept as a view, and the rest of the message, a few dozen bytes per batch, is parsed by
protobuf as before. The walk costs a handful of steps per batch field, never per entry: a
batch of separate entries (`entries`, field 7, wire version 1) is left whole to protobuf at its
first entry. Anything unexpected (a field of an unknown wire type, a length past the end: the
walk is bookie.proto.wire.message_fields) falls back to protobuf's parse of the whole frame,
which accepts or refuses it exactly as before.
"""

from __future__ import annotations

from bookie.proto import bookie_pb2 as pb
from bookie.proto.wire import LENGTH_DELIMITED, WireFormatError, encode_varint, message_fields
from bookie.storage.errors import ensure

_BATCHES = 1  # AddRequest.batches
_ENTRIES = 7  # AddBatch.entries: a batch of separate entries, left to protobuf whole
_RUN_BODY = 9  # AddBatch.run_body
_FIELDS_MAX = 64  # fields walked per batch before it is left to protobuf (a batch has about 8)
# Frames smaller than this are parsed by protobuf alone: the walk's fixed cost (about 15-20 us
# per request in Python on the 2-core VM under load, against 1.3 us for protobuf's parse of a
# 1 KiB add) is what the two copies of a ~128 KiB body cost (measured side by side, 2026-11-28).
SPLIT_FRAME_BYTES_MIN = 128 * 1024


def _cut_run_body(batch: memoryview) -> tuple[bytes, memoryview | None]:
    """The batch's bytes without its run_body field, and that field's value (the last one, as
    protobuf takes it), or (the batch whole, None) when it has no run body to cut.
    WireFormatError for a batch this walk does not take (protobuf then parses the frame)."""
    kept: list[memoryview] = []
    body: memoryview | None = None
    for number, wire, start, value_at, end in message_fields(batch, _FIELDS_MAX):
        if number == _ENTRIES:
            return bytes(batch), None  # separate entries: protobuf takes the batch whole
        if number == _RUN_BODY and wire == LENGTH_DELIMITED:
            body = batch[value_at:end]
        else:
            kept.append(batch[start:end])
    if body is None:
        return bytes(batch), None
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
        for number, wire, _, value_at, end in message_fields(view):
            if number != _BATCHES or wire != LENGTH_DELIMITED:
                raise WireFormatError(f"field {number} of wire type {wire} in an AddRequest")
            rest, body = _cut_run_body(view[value_at:end])
            parts += (b"\x0a", encode_varint(len(rest)), rest)
            bodies.append(body)
    except WireFormatError:
        request = pb.AddRequest.FromString(frame)
        return request, [None] * len(request.batches)
    request = pb.AddRequest.FromString(b"".join(parts))
    ensure(len(request.batches) == len(bodies), "one parsed batch per batch field walked")
    return request, bodies
