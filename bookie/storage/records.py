"""Byte layouts of journal records and entry-log entries. Pure: no I/O, no state.

Journal record:  [magic u32][body length u32][crc32c(body) u32][body]
Body:            [type u8][version u8] + type-specific fields (little endian throughout). The
                 version byte is the record's on-disk format (format_version.py): 0 in format 1,
                 where release 0.1.0 wrote it as padding; else the format number.

ADD_BATCH body:  [type u8][version u8][pad 2][scope u64][ledger u64][count u32] then `count` entries, each
                 in exactly the entry-log layout below. Because the layouts match, the entry
                 log append after the journal write is a single copy of the body's tail, and
                 a batch lands contiguously in the entry log.
Entry (log):     [scope u64][ledger u64][entry u64][lac i64][length u32][crc32c(data) u32][data]
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Sequence
from typing import NamedTuple

from crc32c import crc32c

from bookie import crc_batch
from bookie.errors import BookieError
from bookie.storage.errors import RecordFormatError

# Not ASCII, so text payloads rarely contain it; only matters when scanning past damage.
JOURNAL_MAGIC = 0xE7A1_C0DE
RECORD_HEADER = struct.Struct("<III")
RECORD_HEADER_BYTES = RECORD_HEADER.size
MAGIC_BYTES = struct.pack("<I", JOURNAL_MAGIC)

ADD_BATCH = 1
MASTER_KEY = 2
FENCE = 3
EXPLICIT_LAC = 4
DELETE = 5

ADD_HEADER = struct.Struct("<BBxxQQI")
ADD_HEADER_BYTES = ADD_HEADER.size
LEDGER_RECORD = struct.Struct("<BBxxQQ")  # FENCE, DELETE
MASTER_KEY_RECORD = struct.Struct("<BBHQQ")  # then the key bytes
LAC_RECORD = struct.Struct("<BBxxQQq")

ENTRY_HEADER = struct.Struct("<QQQqII")
ENTRY_HEADER_BYTES = ENTRY_HEADER.size
# An ADD_BATCH whose entries average at least this many bytes keeps them as separate parts:
# joining them into one body would copy every byte once more (a buffer per entry costs more for
# small ones).
SEPARATE_ENTRY_BYTES_MIN = 16 * 1024
# Data at least this large is combined into the record's crc from its own crc (crc_batch.extend,
# a few microseconds) instead of being read a second time (a crc32c pass: ~6 us per 128 KiB).
COMBINE_BYTES_MIN = 128 * 1024


class EncodedBatch(NamedTuple):
    """An ADD_BATCH record ready for the journal, plus what the index needs after it is
    durable (ids, lengths; entry offsets follow from the lengths)."""

    # (record header, body), or for large entries (record header, add header, then each entry's
    # header and data): the journal and the entry log write them with one pwritev, never joined.
    parts: tuple[bytes | memoryview, ...]
    region_offset: int  # where the entries region starts inside the body
    ids: list[int]
    lens: array[int]  # array('i'); entry k's header is at sum(HDR + lens[j] for j < k)
    contiguous: bool  # ids are first, first+1, ... (the index fast path)
    max_lac: int
    data_bytes: int

    @property
    def record_bytes(self) -> int:
        return sum(map(len, self.parts))

    @property
    def region(self) -> list[bytes | memoryview]:
        """The entries, in entry-log layout, as the parts to append to an entry log."""
        if len(self.parts) == 2:
            return [memoryview(self.parts[1])[self.region_offset:]]
        return list(self.parts[2:])


class BatchRejected(BookieError):
    """Raised by encode_add_batch for a request the engine must refuse; carries the reason."""

    def __init__(self, reason: str, too_large: bool = False) -> None:
        super().__init__(reason)
        self.too_large = too_large


def frame(body: bytes) -> tuple[bytes, bytes]:
    """Record header and body, kept apart so the journal joins them without an extra copy."""
    return RECORD_HEADER.pack(JOURNAL_MAGIC, len(body), crc32c(body)), body


def encode_add_batch(
    scope: int,
    ledger: int,
    entries: Sequence[tuple[int, int, bytes | memoryview]],
    entry_bytes_max: int,
    entry_id_max: int,
    version: int = 0,
) -> EncodedBatch:
    """Validate and encode one batch. This loop is the per-entry hot path of every add: one
    crc, one struct pack and a few appends per entry, nothing else."""
    count = len(entries)
    if count == 0:
        raise BatchRejected("empty batch")
    pack = ENTRY_HEADER.pack
    parts: list[bytes | memoryview] = [ADD_HEADER.pack(ADD_BATCH, version, scope, ledger, count)]
    append = parts.append
    ids: list[int] = []
    lens = array("i")
    ids_append = ids.append
    lens_append = lens.append
    max_lac = -1
    try:
        for entry_id, lac, data in entries:
            n = len(data)
            if n > entry_bytes_max:
                raise BatchRejected(f"entry {entry_id} is {n} bytes > {entry_bytes_max}", True)
            if entry_id < 0 or entry_id > entry_id_max or lac < -1 or lac > entry_id_max:
                raise BatchRejected(f"entry id {entry_id} or lac {lac} out of range")
            append(pack(scope, ledger, entry_id, lac, n, crc32c(data)))
            append(data)
            ids_append(entry_id)
            lens_append(n)
            if lac > max_lac:
                max_lac = lac
    except (TypeError, ValueError, struct.error) as e:
        raise BatchRejected(f"malformed entry: {e}") from e
    contiguous = ids[-1] - ids[0] == count - 1 and (count < 3 or _is_ascending_run(ids))
    data_bytes = sum(lens)
    if data_bytes < count * SEPARATE_ENTRY_BYTES_MIN:
        body = b"".join(parts)  # small entries: one copy costs less than a buffer each
        return EncodedBatch(frame(body), ADD_HEADER_BYTES, ids, lens, contiguous, max_lac, data_bytes)
    # Large entries stay where they arrived (views of the request): the record's crc is that of
    # the parts in order, the same value as over their join, with no copy. An entry's data is not
    # read again: its crc (in its header, just computed) is combined into the record's.
    crc = crc32c(parts[0])
    for at in range(1, len(parts), 2):
        entry_header, data = parts[at], parts[at + 1]
        crc = crc32c(entry_header, crc)
        if len(data) >= COMBINE_BYTES_MIN:
            crc = crc_batch.extend(crc, ENTRY_HEADER.unpack(entry_header)[5], len(data))
        else:
            crc = crc32c(data, crc)
    header = RECORD_HEADER.pack(JOURNAL_MAGIC, sum(map(len, parts)), crc)
    return EncodedBatch((header, *parts), ADD_HEADER_BYTES, ids, lens, contiguous, max_lac, data_bytes)


def _is_ascending_run(ids: list[int]) -> bool:
    # ids[-1] - ids[0] == count - 1 alone does not prove ids are consecutive (e.g. 0, 2, 1).
    first = ids[0]
    return ids == list(range(first, first + len(ids)))


def encode_master_key(scope: int, ledger: int, key: bytes, version: int = 0) -> tuple[bytes, bytes]:
    return frame(MASTER_KEY_RECORD.pack(MASTER_KEY, version, len(key), scope, ledger) + key)


def encode_fence(scope: int, ledger: int, version: int = 0) -> tuple[bytes, bytes]:
    return frame(LEDGER_RECORD.pack(FENCE, version, scope, ledger))


def encode_delete(scope: int, ledger: int, version: int = 0) -> tuple[bytes, bytes]:
    return frame(LEDGER_RECORD.pack(DELETE, version, scope, ledger))


def encode_explicit_lac(scope: int, ledger: int, lac: int, version: int = 0) -> tuple[bytes, bytes]:
    return frame(LAC_RECORD.pack(EXPLICIT_LAC, version, scope, ledger, lac))


def record_type(body: memoryview | bytes) -> int:
    if len(body) < 1:
        raise RecordFormatError("empty record body")
    return body[0]


def decode_ledger_record(body: memoryview | bytes) -> tuple[int, int]:
    if len(body) != LEDGER_RECORD.size:
        raise RecordFormatError(f"ledger record has {len(body)} bytes, want {LEDGER_RECORD.size}")
    _, _, scope, ledger = LEDGER_RECORD.unpack_from(body, 0)
    return scope, ledger


def decode_master_key(body: memoryview | bytes) -> tuple[int, int, bytes]:
    if len(body) < MASTER_KEY_RECORD.size:
        raise RecordFormatError("short master key record")
    _, _, key_len, scope, ledger = MASTER_KEY_RECORD.unpack_from(body, 0)
    if len(body) != MASTER_KEY_RECORD.size + key_len:
        raise RecordFormatError("master key record length mismatch")
    return scope, ledger, bytes(body[MASTER_KEY_RECORD.size :])


def decode_explicit_lac(body: memoryview | bytes) -> tuple[int, int, int]:
    if len(body) != LAC_RECORD.size:
        raise RecordFormatError("explicit lac record length mismatch")
    _, _, scope, ledger, lac = LAC_RECORD.unpack_from(body, 0)
    return scope, ledger, lac


class DecodedBatch(NamedTuple):
    scope: int
    ledger: int
    ids: list[int]
    lens: array[int]
    contiguous: bool
    max_lac: int
    data_bytes: int


def decode_add_batch(body: memoryview | bytes) -> DecodedBatch:
    """Walk the entry headers of a checksummed ADD_BATCH body (journal replay)."""
    if len(body) < ADD_HEADER_BYTES:
        raise RecordFormatError("short add batch record")
    _, _, scope, ledger, count = ADD_HEADER.unpack_from(body, 0)
    unpack_from = ENTRY_HEADER.unpack_from
    ids: list[int] = []
    lens = array("i")
    size = len(body)
    pos = ADD_HEADER_BYTES
    max_lac = -1
    data_bytes = 0
    for _ in range(count):
        if pos + ENTRY_HEADER_BYTES > size:
            raise RecordFormatError("add batch entry header past end of record")
        s, lg, entry_id, lac, n, _crc = unpack_from(body, pos)
        if s != scope or lg != ledger:
            raise RecordFormatError("add batch entry belongs to another ledger")
        ids.append(entry_id)
        lens.append(n)
        data_bytes += n
        if lac > max_lac:
            max_lac = lac
        pos += ENTRY_HEADER_BYTES + n
    if pos != size or count == 0:
        raise RecordFormatError(f"add batch length mismatch: entries end at {pos}, body is {size}")
    contiguous = ids[-1] - ids[0] == count - 1 and (count < 3 or _is_ascending_run(ids))
    return DecodedBatch(scope, ledger, ids, lens, contiguous, max_lac, data_bytes)
