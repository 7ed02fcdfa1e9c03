"""The envelope every value ZooKeeperStore writes travels in: a random write token that lets the
store tell, after a connection loss, whether its own write was applied (metadata/zookeeper_store.py).

    2 magic bytes | 16-byte write token | the caller's value

A value without the magic (written by hand, or before the envelope) is read as it is.
"""

from __future__ import annotations

import os

ENVELOPE_MAGIC = b"\xfe\x01"
TOKEN_BYTES = 16
ENVELOPE_BYTES = len(ENVELOPE_MAGIC) + TOKEN_BYTES


def wrap(value: bytes) -> tuple[bytes, bytes]:
    """(stored bytes, the write's token)."""
    token = os.urandom(TOKEN_BYTES)
    return ENVELOPE_MAGIC + token + bytes(value), token


def unwrap(data: bytes | None) -> tuple[bytes, bytes | None]:
    """(the caller's value, the token it was written with, None for a value without envelope)."""
    data = data or b""
    if len(data) >= ENVELOPE_BYTES and data[:2] == ENVELOPE_MAGIC:
        return data[ENVELOPE_BYTES:], data[2:ENVELOPE_BYTES]
    return data, None
