"""Runs of stored entries verified in bulk: the entry format's decoder for range reads.

A bookie answers a range read with runs (bookie.proto EntryRun): the stored entries of
consecutive ids laid end to end in one buffer, plus their lengths. decode_blob verifies a run
exactly as entry_format.decode_entry verifies one entry (format version,
digest type, scope, ledger and entry id, digest), with a handful of vectorised calls instead of
Python per entry: numpy reads every header at once (a gather of the header bytes, or one strided
copy when all entries have the same length), the crc32c of every header comes from lookup tables
(crc32c_rows), and payloads are checked either all at once (equal sizes: bookie.crc_batch) or
with one crc32c call each. It stops at the first entry that fails and says why.

Payloads come out in one of two shapes, from the same checks:
  - contiguous (raw logs: one row per entry): one Arrow binary array, the payloads copied once
    end to end, which is the `payload` column as it is;
  - views (Arrow logs: few large entries): one zero-copy pa.Buffer per payload, a slice of the
    bytes gRPC received, opened as an IPC stream without copying.

The header layout is entry_format's (docs/entry-format.md); HEADER_DTYPE spells it for numpy
and is checked against entry_format's size at import. No pyspark here.
"""

from __future__ import annotations

import functools
import hmac
import io
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import crc32c
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bookie.crc_batch import PIECES_MIN, all_match, byte_tables, shift
from metadata.ledger import DigestType  # the module: the protocol room names what it uses
from pyspark_ledger.protocol.digest import Digest
from pyspark_ledger.protocol.entry_format import BATCH_FORMAT_VERSION, FORMAT_VERSION, HEADER_BYTES, flags_byte

# entry_format's header (flags, scope id, ledger id, entry id, LAC, length), big-endian.
_HEADER_FIELDS = [("flags", "u1"), ("scope", ">u8"), ("ledger", ">u8"), ("entry", ">i8"), ("lac", ">i8"), ("length", ">i8")]
HEADER_DTYPE = np.dtype(_HEADER_FIELDS)
if HEADER_DTYPE.itemsize != HEADER_BYTES:  # a changed entry format must change this layout too
    raise ImportError(f"entry_runs' header layout is {HEADER_DTYPE.itemsize} bytes, the entry format's {HEADER_BYTES}")
# The header bytes every entry of one ledger shares: flags, scope id, ledger id.
_FIXED_HEADER_BYTES = 17
# Cut payloads "to the end" with an explicit, safe stop (binary_slice's default overflows).
_SLICE_TO_END = 1 << 30


@dataclass(frozen=True)
class DecodedRun:
    """The verified prefix of a run of entries first..first+count-1, and why it stopped early."""

    first_entry_id: int
    payloads: pa.BinaryArray | list[pa.Buffer]  # one per verified entry (a list: views)
    error: str | None = None  # set when an entry failed verification (the run ends before it)

    def buffers(self) -> Iterator[pa.Buffer]:
        if isinstance(self.payloads, list):
            return iter(self.payloads)
        return payload_buffers(self.payloads)

    @property
    def count(self) -> int:
        return len(self.payloads)


def _record_dtype(digest: Digest) -> np.dtype:
    """The header followed by the stored digest."""
    fields = list(_HEADER_FIELDS)
    if digest.size == 4:
        fields.append(("crc", ">u4"))
    elif digest.size:
        fields.append(("mac", f"V{digest.size}"))
    return np.dtype(fields)


def fixed_prefix(digest: Digest, scope_id: int, ledger_id: int) -> bytes:
    """The first bytes of every entry of one ledger (flags, scope id, ledger id)."""
    return np.array([(flags_byte(digest), scope_id, ledger_id, 0, 0, 0)], dtype=HEADER_DTYPE).tobytes()[:_FIXED_HEADER_BYTES]


def check_run(data: bytes | memoryview, lengths: np.ndarray) -> str | None:
    """Why a run as received (entries end to end in `data`, `lengths` each) is malformed, or
    None: it must hold at least one entry, non-negative lengths that add up to the data, and
    fit one Arrow binary array (int32 offsets)."""
    if len(lengths) == 0:
        return "a run with no entries"
    if int(lengths.min()) < 0:
        return "a run with a negative entry length"
    total = int(lengths.sum())
    if total != len(data):
        return f"a run's lengths add up to {total} bytes but it carries {len(data)}"
    if total >= 2**31:
        return f"a run of {total} bytes is too large for one binary array"
    return None


def decode_run(digest: Digest, scope_id: int, ledger_id: int, first_entry_id: int,
               entries: Sequence[bytes], *, views: bool = False) -> DecodedRun:
    """decode_blob for entries given one by one (they are laid end to end first)."""
    lengths = np.fromiter(map(len, entries), dtype=np.int64, count=len(entries))
    if len(entries) == 0:
        return DecodedRun(first_entry_id, [] if views else pa.array([], pa.binary()))
    return decode_blob(digest, scope_id, ledger_id, first_entry_id, b"".join(entries), lengths, views=views)


def decode_blob(digest: Digest, scope_id: int, ledger_id: int, first_entry_id: int,
                data: bytes | memoryview, lengths: np.ndarray, *, views: bool = False) -> DecodedRun:
    """Verify the entries first_entry_id.. laid end to end in `data` (entry i is lengths[i]
    bytes): the payloads of the longest valid prefix, contiguous or as views (module doc), and
    what was wrong with the first bad entry. A malformed run (check_run) verifies nothing."""
    empty: pa.BinaryArray | list[pa.Buffer] = [] if views else pa.array([], pa.binary())
    malformed = check_run(data, lengths)
    if malformed is not None:
        return DecodedRun(first_entry_id, empty, malformed)
    n = len(lengths)
    hdr_size = HEADER_BYTES + digest.size
    ok = lengths >= hdr_size
    valid = int(n if ok.all() else np.argmin(ok))
    error = None if valid == n else \
        f"entry {first_entry_id + valid}: {int(lengths[valid])} bytes is shorter than a header and digest"
    if valid == 0:
        return DecodedRun(first_entry_id, empty, error)
    lengths = lengths[:valid]
    starts = np.cumsum(lengths) - lengths
    headers = _headers(data, starts, lengths, hdr_size)
    rec = headers.view(_record_dtype(digest)).reshape(valid)
    flags_ok = rec["flags"] == flags_byte(digest)
    ids_ok = (rec["scope"] == scope_id) & (rec["ledger"] == ledger_id) & (
        rec["entry"] == np.arange(first_entry_id, first_entry_id + valid, dtype=np.int64))
    good = flags_ok & ids_ok
    sizes = lengths - hdr_size
    payloads: pa.BinaryArray | list[pa.Buffer]
    if views:
        whole = pa.py_buffer(data)
        payloads = [whole.slice(s, z) for s, z in zip((starts + hdr_size).tolist(), sizes.tolist())]
        if digest.size:
            good &= _digests_ok_each(digest, headers, rec, payloads, fixed_prefix(digest, scope_id, ledger_id))
    else:
        payloads, payload_data = _contiguous(data, lengths, hdr_size)
        if digest.size:
            good &= _digests_ok(digest, headers, rec, payload_data, sizes, fixed_prefix(digest, scope_id, ledger_id))
    if not good.all():
        bad = int(np.argmin(good))
        error = f"entry {first_entry_id + bad}: {_why(digest, rec, bad, bool(flags_ok[bad]), bool(ids_ok[bad]))}"
        payloads = payloads[:bad] if isinstance(payloads, list) else payloads.slice(0, bad)
    return DecodedRun(first_entry_id, payloads, error)


def _why(digest: Digest, rec: np.ndarray, bad: int, flags_ok: bool, ids_ok: bool) -> str:
    if not flags_ok and (int(rec["flags"][bad]) >> 4) & 0x7 == BATCH_FORMAT_VERSION:
        return ("a batch of messages (entry format 3): this Spark source reads one message per entry; read the log "
                "with LogReader or `ledger logs read`")
    if not flags_ok:
        return f"unsupported entry format or digest (flags 0x{int(rec['flags'][bad]):02x}, format {FORMAT_VERSION} expected)"
    if not ids_ok:
        return (f"bytes belong to entry {int(rec['entry'][bad])} of ledger "
                f"{int(rec['scope'][bad]):016x}{int(rec['ledger'][bad]):016x}")
    return "digest mismatch" + (" (wrong password?)" if digest.key else "")


def _headers(data: bytes | memoryview, starts: np.ndarray, lengths: np.ndarray, hdr_size: int) -> np.ndarray:
    """Each entry's header and digest as an n x hdr_size byte array (a copy of those bytes only)."""
    n = len(lengths)
    size = int(lengths[0])
    raw = np.frombuffer(data, dtype=np.uint8, count=int(starts[-1] + lengths[-1]))
    if int(lengths.max()) == size == int(lengths.min()):
        return np.ascontiguousarray(raw[: n * size].reshape(n, size)[:, :hdr_size])
    return raw[starts[:, None] + np.arange(hdr_size)]


def _contiguous(data: bytes | memoryview, lengths: np.ndarray, hdr_size: int) -> tuple[pa.BinaryArray, bytes]:
    """The payloads (each entry after its first hdr_size bytes) copied end to end: as one
    binary array, and its data as bytes."""
    n = len(lengths)
    size = int(lengths[0])
    if int(lengths.max()) == size == int(lengths.min()):
        # Equal lengths (fixed-size records, the common case): an n x size grid, one strided copy.
        grid = np.frombuffer(data, dtype=np.uint8, count=n * size).reshape(n, size)
        payload_offsets = np.arange(n + 1, dtype=np.int32) * (size - hdr_size)  # < 2**31: check_run
        payload_data = grid[:, hdr_size:].tobytes()
        return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(payload_offsets),
                                                      pa.py_buffer(payload_data)]), payload_data
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    whole = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    payloads = pc.binary_slice(whole, hdr_size, _SLICE_TO_END)
    values = payloads.buffers()[2]
    return payloads, values.to_pybytes() if values is not None else b""


def _digests_ok(digest: Digest, headers: np.ndarray, rec: np.ndarray, payload_data: bytes,
                payload_sizes: np.ndarray, prefix: bytes) -> np.ndarray:
    """Per entry: does its stored digest match the one computed over its header (the first
    HEADER_BYTES of its row in `headers`) and its payload (the next payload_sizes[i] bytes of
    payload_data)? Exact for entries whose header starts with `prefix` (the expected flags and
    ledger id, which the caller checks): other entries are already bad."""
    n = len(payload_sizes)
    if digest.type is DigestType.CRC32C:
        # digest = crc32c(header || payload): the header part for every entry at once (tables).
        header_crcs = crc32c_rows(headers[:, :HEADER_BYTES], prefix)
        size = int(payload_sizes[0]) if n else 0
        if n >= PIECES_MIN and size and int(payload_sizes.min()) == int(payload_sizes.max()) == size:
            # Many equal payloads (fixed-size records): crc(header || payload) = shift_size(crc(header))
            # ^ crc(payload), so every payload's own crc is known from its digest, and all of
            # them are checked with one pass over payload_data (bookie/crc_batch.py).
            stored = rec["crc"].astype(np.uint32)
            if all_match(payload_data, stored ^ shift(header_crcs, size), size):
                return np.ones(n, dtype=bool)
        # Otherwise (few or mixed sizes, or to find the bad entry): one crc32c call per payload.
        payloads = _cut(payload_data, payload_sizes)
        return np.fromiter(map(crc32c.crc32c, payloads, header_crcs.tolist()), dtype=np.uint32, count=n) == rec["crc"]
    return _digests_ok_each(digest, headers, rec, list(_cut(payload_data, payload_sizes)), prefix)


def _digests_ok_each(digest: Digest, headers: np.ndarray, rec: np.ndarray, payloads: Sequence[pa.Buffer | bytes],
                     prefix: bytes) -> np.ndarray:
    """_digests_ok with one digest call per payload, each payload a buffer of its own."""
    n = len(payloads)
    if digest.type is DigestType.CRC32C:
        header_crcs = crc32c_rows(headers[:, :HEADER_BYTES], prefix)
        return np.fromiter(map(crc32c.crc32c, payloads, header_crcs.tolist()), dtype=np.uint32, count=n) == rec["crc"]
    return np.fromiter((hmac.compare_digest(digest.compute(row[:HEADER_BYTES].tobytes(), memoryview(p)),
                                            row[HEADER_BYTES:].tobytes())
                        for row, p in zip(headers, payloads)), dtype=bool, count=n)


def _cut(data: bytes, sizes: np.ndarray) -> Iterator[bytes]:
    """One bytes object per piece, cut by BytesIO.read inside a C iterator (map): the cheapest
    per-entry object CPython offers (about half the cost of a slice + memoryview)."""
    return map(io.BytesIO(data).read, sizes.tolist())


@functools.cache
def _crc32c_tables(size: int) -> tuple[np.ndarray, int]:
    """Per byte position k of a size-byte message, T[k][b] = crc32c(b at k, zeros elsewhere)
    ^ crc32c(size zeros); and crc32c(size zeros). CRC32C is affine in the message bits for a
    fixed length, so crc32c(m) = crc32c(zeros) ^ XOR_k T[k][m[k]]. Built from the 8 one-bit
    messages of each position (T[k] is linear in b)."""
    zero = crc32c.crc32c(bytes(size))
    basis = np.empty((size, 8), dtype=np.uint32)
    for k in range(size):
        for j in range(8):
            message = bytearray(size)
            message[k] = 1 << j
            basis[k, j] = crc32c.crc32c(message) ^ zero
    return byte_tables(basis), zero


def crc32c_rows(rows: np.ndarray, prefix: bytes = b"") -> np.ndarray:
    """crc32c of every row of an n x size byte array, vectorised: `size` table lookups over
    the n rows instead of n calls. Worth it for short rows (entry headers: 41 bytes); a call
    per row wins for long ones. With a `prefix`, the rows are taken to start with it (the
    caller checks that): its bytes count once, as a constant, instead of a lookup per row."""
    n, size = rows.shape
    tables, base = _crc32c_tables(size)
    for k, b in enumerate(prefix):
        base ^= int(tables[k][b])
    acc = np.full(n, base, dtype=np.uint32)
    for k in range(len(prefix), size):
        acc ^= tables[k].take(rows[:, k])
    return acc


def payload_buffers(payloads: pa.BinaryArray) -> Iterator[pa.Buffer]:
    """Each value of a binary array as a zero-copy buffer."""
    _, offsets_buf, data = payloads.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int32, count=len(payloads) + 1 + payloads.offset)[payloads.offset:]
    for i in range(len(payloads)):
        start = int(offsets[i])
        yield data.slice(start, int(offsets[i + 1]) - start)
