"""Entry payloads as a pure function of (ledger, entry): a lost or changed copy is detectable."""

from __future__ import annotations

import zlib

ENTRY_SIZE_MIN_BYTES = 600
ENTRY_SIZE_MAX_BYTES = 3000


def token_of(ledger: int, entry_id: int) -> int:
    return zlib.crc32(f"{ledger}/{entry_id}".encode())


def size_of(ledger: int, entry_id: int) -> int:
    span = ENTRY_SIZE_MAX_BYTES - ENTRY_SIZE_MIN_BYTES + 1
    return ENTRY_SIZE_MIN_BYTES + zlib.crc32(f"size {ledger}/{entry_id}".encode()) % span


def length_through(ledger: int, last_entry: int) -> int:
    """The ledger's length (payload bytes) through `last_entry`: what an entry's header says."""
    return sum(size_of(ledger, e) for e in range(last_entry + 1))
