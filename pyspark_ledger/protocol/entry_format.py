"""The entry format (BP-35 "v2"), byte by byte in docs/entry-format.md.

    offset  size  field
    0       1     flags: bit 7 = 1 (v2 and later), bits 4-6 = format version (2), bits 0-3 = digest type
    1       8     ledger scope id      (u64, big-endian)
    9       8     ledger id            (u64)
    17      8     entry id             (i64)
    25      8     last add confirmed   (i64, -1 = none)
    33      8     length               (i64: the ledger's total payload bytes up to and including this entry)
    41      x     digest over bytes 0..40 and the payload (x = 4 crc32c, 32 mac, 0 none)
    41+x    ...   payload

No I/O here. Decoding checks everything the reader can check: version, digest type, that the
entry belongs to the expected ledger and id, and the digest.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from dataclasses import dataclass

import crc32c

from metadata.ledger import DigestType  # the module, not the package that re-exports the stores too
from pyspark_ledger.errors import DigestMismatchError, EntryFormatError
from pyspark_ledger.protocol.digest import DIGEST_BY_CODE, Digest

FORMAT_VERSION = 2
_HEADER = struct.Struct(">BQQqqq")
HEADER_BYTES = _HEADER.size  # 41
_V2_MARKER = 0x80


def flags_byte(digest: Digest) -> int:
    return _V2_MARKER | (FORMAT_VERSION << 4) | digest.code


@dataclass(frozen=True, slots=True)
class Entry:
    """A decoded, verified entry."""

    entry_id: int
    payload: bytes
    last_add_confirmed: int = -1
    length: int = 0
    # The stored digest, kept only when the reader could not check it (an operator reading a "mac"
    # ledger, digest.LedgerKeys.for_operator), so a copy can carry it unchanged.
    kept_digest: bytes = b""


def encode_entry(digest: Digest, scope_id: int, ledger_id: int, entry_id: int, lac: int, length: int, payload: bytes) -> bytes:
    header = _HEADER.pack(flags_byte(digest), scope_id, ledger_id, entry_id, lac, length)
    return b"".join((header, digest.compute(header, payload), payload))


def entry_encoder(digest: Digest, scope_id: int, ledger_id: int) -> Callable[[int, int, int, bytes], bytes]:
    """encode_entry for one ledger, as a function of (entry_id, lac, length, payload): what is
    the same for every entry of the ledger is bound once (the writer's per-add hot path)."""
    if digest.type is DigestType.CRC32C:
        flags, pack, join, crc = flags_byte(digest), _HEADER.pack, b"".join, crc32c.crc32c

        def encode_crc32c(entry_id: int, lac: int, length: int, payload: bytes) -> bytes:
            header = pack(flags, scope_id, ledger_id, entry_id, lac, length)
            return join((header, crc(payload, crc(header)).to_bytes(4, "big"), payload))

        return encode_crc32c
    return functools.partial(encode_entry, digest, scope_id, ledger_id)  # mac, none: not the hot case


def decode_entry(digest: Digest, data: bytes, scope_id: int, ledger_id: int, entry_id: int) -> Entry:
    """Verify and decode the stored bytes of (scope_id, ledger_id, entry_id)."""
    where = f"entry {entry_id} of ledger {scope_id:016x}{ledger_id:016x}"
    if len(data) < HEADER_BYTES + digest.size:
        raise EntryFormatError(f"{where}: {len(data)} bytes is shorter than a header and digest")
    flags, scope, ledger, eid, lac, length = _HEADER.unpack_from(data)
    if not flags & _V2_MARKER or (flags >> 4) & 0x7 != FORMAT_VERSION:
        raise EntryFormatError(f"{where}: unsupported entry format (flags 0x{flags:02x})")
    code = flags & 0x0F
    if code != digest.code:
        name = DIGEST_BY_CODE[code].value if code in DIGEST_BY_CODE else f"code {code}"
        raise EntryFormatError(f"{where}: entry has digest {name}, the ledger uses {digest.type.value}")
    if (scope, ledger, eid) != (scope_id, ledger_id, entry_id):
        raise EntryFormatError(f"{where}: bytes belong to entry {eid} of ledger {scope:016x}{ledger:016x}")
    end = HEADER_BYTES + digest.size
    payload = data[end:]
    if not digest.verifiable:
        return Entry(eid, payload, lac, length, bytes(data[HEADER_BYTES:end]))
    if digest.size and digest.compute(data[:HEADER_BYTES], payload) != data[HEADER_BYTES:end]:
        hint = " (wrong password?)" if digest.key else ""
        raise DigestMismatchError(f"{where}: digest mismatch{hint}")
    return Entry(eid, payload, lac, length)


def encode_copy(digest: Digest, scope_id: int, ledger_id: int, entry: Entry) -> bytes:
    """A decoded entry encoded again for another bookie (recovery, repair, re-replication): with
    the digest it was stored with when this reader could not compute one, else a fresh one."""
    if entry.kept_digest:
        header = _HEADER.pack(flags_byte(digest), scope_id, ledger_id, entry.entry_id, entry.last_add_confirmed,
                              entry.length)
        return b"".join((header, entry.kept_digest, entry.payload))
    return encode_entry(digest, scope_id, ledger_id, entry.entry_id, entry.last_add_confirmed, entry.length,
                        entry.payload)
