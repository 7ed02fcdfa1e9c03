"""Protobuf's wire format by hand: the base-128 varint, for the messages built by hand on the add
path (an add batch's frame on the client, an add answer on the bookie) and for tests that build
raw messages; and a walk over a message's fields, for the parsers that keep one large field as a
view of the bytes received instead of letting protobuf copy it (the bookie's add frames,
bookie/add_runs.py; the client's run answers, pyspark_ledger/transport/run_response.py)."""

from __future__ import annotations

from bookie.errors import BookieError

VARINT, FIXED64, LENGTH_DELIMITED, FIXED32 = 0, 1, 2, 5
_VARINT_BYTES_MAX = 10

_SMALL = [bytes([i]) for i in range(0x80)]


def encode_varint(n: int) -> bytes:
    """A non-negative integer as a varint (one byte below 128, the common case, from a table)."""
    if 0 <= n < 0x80:
        return _SMALL[n]
    if n < 0:  # a length or an id: never negative (protobuf would take ten bytes of two's complement)
        raise ValueError(f"a varint of a negative number {n}")
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class WireFormatError(BookieError, ValueError):
    """The bytes are not a well-formed protobuf message (or have more fields than allowed)."""


def decode_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    """The varint at `pos` and the position after it."""
    if pos < len(buf) and buf[pos] < 0x80:
        return buf[pos], pos + 1  # one byte: keys, and most lengths of the small fields
    value = shift = 0
    for _ in range(_VARINT_BYTES_MAX):
        if pos >= len(buf):
            raise WireFormatError("a varint runs past the end of the message")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise WireFormatError(f"a varint longer than {_VARINT_BYTES_MAX} bytes")


Field = tuple[int, int, int, int, int]  # (number, wire type, start of its tag, start of its value, end)


def message_fields(buf: memoryview, fields_max: int | None = None) -> list[Field]:
    """Each field of the message in `buf`, in order; a length-delimited field's value starts after
    its length. WireFormatError for a malformed message, a group, or more than `fields_max` fields."""
    out: list[Field] = []
    pos, end = 0, len(buf)
    while pos < end:
        if fields_max is not None and len(out) >= fields_max:
            raise WireFormatError(f"more than {fields_max} fields")
        start = pos
        key, pos = decode_varint(buf, pos)
        number, wire = key >> 3, key & 7
        value_at = pos
        if wire == VARINT:
            pos = decode_varint(buf, pos)[1]
        elif wire == FIXED64:
            pos += 8
        elif wire == FIXED32:
            pos += 4
        elif wire == LENGTH_DELIMITED:
            size, value_at = decode_varint(buf, pos)
            pos = value_at + size
        else:
            raise WireFormatError(f"unsupported wire type {wire} for field {number}")
        if pos > end or number == 0:
            raise WireFormatError(f"field {number} runs past the end of the message")
        out.append((number, wire, start, value_at, pos))
    return out


# gRPC metadata key of the cluster's operator secret (bookie/auth.py checks it; the client's
# pyspark_ledger/transport/credentials.py sends it). Lower case, as gRPC requires; "-bin": the value may be any bytes.
OPERATOR_SECRET_HEADER = "x-ledger-operator-secret-bin"
