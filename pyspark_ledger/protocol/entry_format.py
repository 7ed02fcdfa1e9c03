"""The entry format (BP-35 "v2"), byte by byte in docs/entry-format.md.

    offset  size  field
    0       1     flags: bit 7 = 1 (v2 and later), bits 4-6 = format version (2 or 3), bits 0-3 = digest type
    1       8     ledger scope id      (u64, big-endian)
    9       8     ledger id            (u64)
    17      8     entry id             (i64)
    25      8     last add confirmed   (i64, -1 = none)
    33      8     length               (i64: the ledger's total payload bytes up to and including this entry)
    41      x     digest over bytes 0..40 and the payload (x = 4 crc32c, 32 mac, 0 none)
    41+x    ...   payload (version 2: one message; version 3: a batch of messages, protocol.message_batch)

The header is the same in versions 2 and 3; version 3 says only that the payload is a message
batch. A reader of an older release refuses a version-3 entry ("unsupported entry format")
rather than hand its framing to a user as if it were a message.
No I/O here. Decoding checks everything the reader can check: version, digest type, that the
entry belongs to the expected ledger and id, and the digest.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate, repeat

import crc32c

from metadata.ledger import DigestType  # the module, not the package that re-exports the stores too
from pyspark_ledger.errors import DigestMismatchError, EntryFormatError
from pyspark_ledger.protocol.digest import DIGEST_BY_CODE, Digest

FORMAT_VERSION = 2  # one message per entry
BATCH_FORMAT_VERSION = 3  # the payload is a message batch (protocol.message_batch)
FORMAT_VERSIONS = (FORMAT_VERSION, BATCH_FORMAT_VERSION)
_HEADER = struct.Struct(">BQQqqq")
HEADER_BYTES = _HEADER.size  # 41
_U32 = struct.Struct(">I")  # a crc32c digest
_V2_MARKER = 0x80
# The ledger custom-metadata key naming the entry format its writer uses (b"3": message batches).
ENTRY_FORMAT_KEY = "entry-format"


def flags_byte(digest: Digest, version: int = FORMAT_VERSION) -> int:
    if version not in FORMAT_VERSIONS:
        raise EntryFormatError(f"entry format version {version} is not one of {FORMAT_VERSIONS}")
    return _V2_MARKER | (version << 4) | digest.code


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
    # 2: the payload is one message; 3: a message batch. A copy keeps it (the digest covers it).
    format_version: int = FORMAT_VERSION


def encode_entry(digest: Digest, scope_id: int, ledger_id: int, entry_id: int, lac: int, length: int, payload: bytes,
                 version: int = FORMAT_VERSION) -> bytes:
    header = _HEADER.pack(flags_byte(digest, version), scope_id, ledger_id, entry_id, lac, length)
    return b"".join((header, digest.compute(header, payload), payload))


def entry_encoder(digest: Digest, scope_id: int, ledger_id: int,
                  version: int = FORMAT_VERSION) -> Callable[[int, int, int, bytes], bytes]:
    """encode_entry for one ledger, as a function of (entry_id, lac, length, payload): what is
    the same for every entry of the ledger is bound once (the writer's per-add hot path)."""
    if digest.type is DigestType.CRC32C:
        flags, pack, join, crc = flags_byte(digest, version), _HEADER.pack, b"".join, crc32c.crc32c

        def encode_crc32c(entry_id: int, lac: int, length: int, payload: bytes) -> bytes:
            header = pack(flags, scope_id, ledger_id, entry_id, lac, length)
            return join((header, crc(payload, crc(header)).to_bytes(4, "big"), payload))

        return encode_crc32c
    # mac, none: not the hot case
    return lambda entry_id, lac, length, payload: encode_entry(digest, scope_id, ledger_id, entry_id, lac, length,
                                                               payload, version)


def run_encoder(digest: Digest, scope_id: int, ledger_id: int, version: int = FORMAT_VERSION
                ) -> Callable[[int, int, int, Sequence[bytes]], tuple[list[bytes], int]]:
    """A run's entries encoded in one pass, as a function of (first entry id, lac, the ledger's
    length before the run, payloads) -> (encoded entries, the length through the run). Each entry
    still gets its own header and digest (the format's rule: docs/entry-format.md), but the
    loops are C-level maps over the run (struct pack, crc32c, join): no Python step per entry."""
    if digest.type is not DigestType.CRC32C:  # mac, none: not the hot case
        encode = entry_encoder(digest, scope_id, ledger_id, version)

        def encode_any(first: int, lac: int, length: int, payloads: Sequence[bytes]) -> tuple[list[bytes], int]:
            lengths = list(accumulate(map(len, payloads), initial=length))
            return list(map(encode, range(first, first + len(payloads)), repeat(lac), lengths[1:], payloads)), \
                lengths[-1]

        return encode_any
    flags, pack, crc, u32, join = flags_byte(digest, version), _HEADER.pack, crc32c.crc32c, _U32.pack, b"".join

    def encode_crc32c_run(first: int, lac: int, length: int, payloads: Sequence[bytes]) -> tuple[list[bytes], int]:
        # Every step a C-level map over the run: no Python bytecode per entry.
        n = len(payloads)
        lengths = list(accumulate(map(len, payloads), initial=length))
        headers = list(map(pack, repeat(flags, n), repeat(scope_id), repeat(ledger_id), range(first, first + n),
                           repeat(lac), lengths[1:]))
        digests = map(u32, map(crc, payloads, map(crc, headers)))
        return list(map(join, zip(headers, digests, payloads))), lengths[-1]

    return encode_crc32c_run


def decode_entry(digest: Digest, data: bytes, scope_id: int, ledger_id: int, entry_id: int) -> Entry:
    """Verify and decode the stored bytes of (scope_id, ledger_id, entry_id)."""
    where = f"entry {entry_id} of ledger {scope_id:016x}{ledger_id:016x}"
    if len(data) < HEADER_BYTES + digest.size:
        raise EntryFormatError(f"{where}: {len(data)} bytes is shorter than a header and digest")
    flags, scope, ledger, eid, lac, length = _HEADER.unpack_from(data)
    version = (flags >> 4) & 0x7
    if not flags & _V2_MARKER or version not in FORMAT_VERSIONS:
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
        return Entry(eid, payload, lac, length, bytes(data[HEADER_BYTES:end]), version)
    if digest.size and digest.compute(data[:HEADER_BYTES], payload) != data[HEADER_BYTES:end]:
        hint = " (wrong password?)" if digest.key else ""
        raise DigestMismatchError(f"{where}: digest mismatch{hint}")
    return Entry(eid, payload, lac, length, format_version=version)


def entry_format_of_ledger(custom: Mapping[str, bytes]) -> int:
    """The entry format version a ledger's writer encodes with: named in the ledger's custom
    metadata (ENTRY_FORMAT_KEY) by a writer of message batches, else version 2."""
    raw = custom.get(ENTRY_FORMAT_KEY)
    if raw is None:
        return FORMAT_VERSION
    try:
        version = int(raw.decode("ascii"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise EntryFormatError(f"ledger custom metadata {ENTRY_FORMAT_KEY}={raw!r} is not a format version") from exc
    if version not in FORMAT_VERSIONS:
        raise EntryFormatError(f"ledger entry format {version} is not one this client writes {FORMAT_VERSIONS}")
    return version


def encode_copy(digest: Digest, scope_id: int, ledger_id: int, entry: Entry) -> bytes:
    """A decoded entry encoded again for another bookie (recovery, repair, re-replication): with
    the digest it was stored with when this reader could not compute one, else a fresh one."""
    if entry.kept_digest:
        header = _HEADER.pack(flags_byte(digest, entry.format_version), scope_id, ledger_id, entry.entry_id,
                              entry.last_add_confirmed, entry.length)
        return b"".join((header, entry.kept_digest, entry.payload))
    return encode_entry(digest, scope_id, ledger_id, entry.entry_id, entry.last_add_confirmed, entry.length,
                        entry.payload, entry.format_version)
