"""Protobuf's base-128 varint, for the messages built by hand on the add path (an add batch's
frame on the client, an add answer on the bookie) and for tests that build raw messages."""

from __future__ import annotations

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


# gRPC metadata key of the cluster's operator secret (bookie/auth.py checks it; the client's
# pyspark_ledger/transport/credentials.py sends it). Lower case, as gRPC requires; "-bin": the value may be any bytes.
OPERATOR_SECRET_HEADER = "x-ledger-operator-secret-bin"
