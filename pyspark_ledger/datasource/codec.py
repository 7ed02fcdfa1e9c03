"""Entries <-> Arrow, in bulk: no per-row Python objects on the read path.

Read side: a run of stored entries, laid end to end in one buffer as a bookie returns them
(bookie.proto EntryRun), is verified and cut into payloads with a handful of vectorised calls.
Entries of equal length (the common case) are an n x size byte grid: headers and payloads come
out with one strided copy each; otherwise the buffer is seen as one Arrow binary array (zero
copy) and `binary_slice` cuts them out. numpy checks every header field at once, the crc32c of
every header comes from lookup tables (crc32c_rows), and only the payload's digest is a call
per entry. Raw payloads become the `payload` column as they are; Arrow payloads are IPC streams
opened zero-copy.

Write side: a task's record batches are packed into entries of at most `rows_max` rows and
about ENTRY_PAYLOAD_BYTES_TARGET bytes (before compression), each one Arrow IPC stream (schema
+ batches, buffers optionally LZ4- or ZSTD-compressed as the IPC format allows), so any single
entry is readable on its own by any Arrow IPC reader.

No pyspark here (pyarrow, numpy and the client's entry format only).
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
from metadata import DigestType
from pyspark_ledger.datasource import keyed_entries
from pyspark_ledger.datasource.rows import META_NAMES, RowPlace, entry_meta, raw_meta, raw_read_schema
from pyspark_ledger.protocol.digest import Digest
from pyspark_ledger.protocol.entry_format import (  # the one header layout
    _HEADER,
    FORMAT_VERSION,
    HEADER_BYTES,
    flags_byte,
)

# An Arrow entry aims at this size: far below the client's 4 MiB entry limit, large enough
# that the per-entry costs (header, digest, quorum round) vanish next to the bytes.
ENTRY_PAYLOAD_BYTES_TARGET = 2 * 2**20
# Compression must pay for itself (as Arrow C++'s IpcWriteOptions.min_space_savings): an entry
# whose compressed form is not at least this much smaller than its data is stored uncompressed,
# so readers of incompressible data (random, encrypted, already compressed) read it zero-copy
# instead of paying ~25 ns a row for decompressing it. While entries do not compress, the packer
# tries again only every COMPRESSION_RETRY_ENTRIES entries, so their writers stop paying too.
COMPRESSION_SAVINGS_MIN = 0.10
COMPRESSION_RETRY_ENTRIES = 16
# Cut payloads "to the end" with an explicit, safe stop (binary_slice's default overflows).
_SLICE_TO_END = 1 << 30

# The header bytes every entry of one ledger shares: flags, scope id, ledger id.
_FIXED_HEADER_BYTES = 17

# The columns of a raw log as read (rows.py): a DataFrame read from one can be written back.
RAW_COLUMNS = ("payload", *META_NAMES)
RAW_ARROW_SCHEMA = raw_read_schema()


# ---- verifying stored entries in bulk --------------------------------------------------------------


@dataclass(frozen=True)
class DecodedRun:
    """The verified prefix of a run of entries first..first+count-1, and why it stopped early."""

    first_entry_id: int
    payloads: pa.BinaryArray | list[pa.Buffer]  # one per verified entry (a list: decode_each)
    error: str | None = None  # set when an entry failed verification (the run ends before it)

    def buffers(self) -> Iterator[pa.Buffer]:
        if isinstance(self.payloads, list):
            return iter(self.payloads)
        return payload_buffers(self.payloads)

    @property
    def count(self) -> int:
        return len(self.payloads)


def _header_dtype(digest: Digest) -> np.dtype:
    fields = [("flags", "u1"), ("scope", ">u8"), ("ledger", ">u8"), ("entry", ">i8"), ("lac", ">i8"), ("length", ">i8")]
    if digest.size == 4:
        fields.append(("crc", ">u4"))
    elif digest.size:
        fields.append(("mac", f"V{digest.size}"))
    return np.dtype(fields)


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


def run_views(data: bytes | memoryview, lengths: np.ndarray) -> list[memoryview]:
    """The entries of a well-formed run (check_run) as zero-copy views."""
    ends = np.cumsum(lengths)
    mv = memoryview(data)
    return list(map(mv.__getitem__, map(slice, (ends - lengths).tolist(), ends.tolist())))


def decode_run(digest: Digest, scope_id: int, ledger_id: int, first_entry_id: int,
               entries: Sequence[bytes]) -> DecodedRun:
    """Verify consecutive stored entries (first_entry_id, first_entry_id+1, ...) exactly as
    pyspark_ledger.protocol.entry_format.decode_entry does, but in bulk. Returns the payloads of the
    longest valid prefix; `error` says what was wrong with the first bad entry, if any."""
    if len(entries) == 0:
        return DecodedRun(first_entry_id, pa.array([], pa.binary()))
    lengths = np.fromiter(map(len, entries), dtype=np.int64, count=len(entries))
    return decode_blob(digest, scope_id, ledger_id, first_entry_id, b"".join(entries), lengths)


def decode_blob(digest: Digest, scope_id: int, ledger_id: int, first_entry_id: int,
                data: bytes | memoryview, lengths: np.ndarray) -> DecodedRun:
    """decode_run for entries already laid end to end in `data`, entry i being lengths[i]
    bytes: a bookie's EntryRun as it arrives, verified without splitting it into objects.
    A malformed run (check_run) verifies nothing and says why."""
    malformed = check_run(data, lengths)
    if malformed is not None:
        return DecodedRun(first_entry_id, pa.array([], pa.binary()), malformed)
    n = len(lengths)
    hdr_size = HEADER_BYTES + digest.size
    ok = lengths >= hdr_size
    valid = int(n if ok.all() else np.argmin(ok))
    error = None if valid == n else \
        f"entry {first_entry_id + valid}: {int(lengths[valid])} bytes is shorter than a header and digest"
    if valid == 0:
        return DecodedRun(first_entry_id, pa.array([], pa.binary()), error)
    headers, payloads, payload_data = _split(data, lengths[:valid], hdr_size)
    rec = headers.view(_header_dtype(digest)).reshape(valid)
    flags_ok = rec["flags"] == flags_byte(digest)
    ids_ok = (rec["scope"] == scope_id) & (rec["ledger"] == ledger_id) & (
        rec["entry"] == np.arange(first_entry_id, first_entry_id + valid, dtype=np.int64))
    good = flags_ok & ids_ok
    if digest.size:
        prefix = _HEADER.pack(flags_byte(digest), scope_id, ledger_id, 0, 0, 0)[:_FIXED_HEADER_BYTES]
        good &= _digests_ok(digest, headers, rec, payload_data, lengths[:valid] - hdr_size, prefix)
    if not good.all():
        bad = int(np.argmin(good))
        eid = first_entry_id + bad
        if not flags_ok[bad]:
            why = f"unsupported entry format or digest (flags 0x{int(rec['flags'][bad]):02x}, format {FORMAT_VERSION} expected)"
        elif not ids_ok[bad]:
            why = (f"bytes belong to entry {int(rec['entry'][bad])} of ledger "
                   f"{int(rec['scope'][bad]):016x}{int(rec['ledger'][bad]):016x}")
        else:
            why = "digest mismatch" + (" (wrong password?)" if digest.key else "")
        error, payloads = f"entry {eid}: {why}", payloads.slice(0, bad)
    return DecodedRun(first_entry_id, payloads, error)


def _split(data: bytes | memoryview, lengths: np.ndarray, hdr_size: int) -> tuple[np.ndarray, pa.BinaryArray, bytes]:
    """Entries (each at least hdr_size bytes) end to end in `data` -> their headers and
    digests as an n x hdr_size byte array, their payloads as one binary array, and the
    payloads end to end (that array's data, as bytes)."""
    n = len(lengths)
    size = int(lengths[0])
    if int(lengths.max()) == size == int(lengths.min()):
        # Equal lengths (fixed-size records, the common case): data is an n x size grid, so
        # headers and payloads come out with one strided copy each.
        grid = np.frombuffer(data, dtype=np.uint8, count=n * size).reshape(n, size)
        payload_offsets = np.arange(n + 1, dtype=np.int32) * (size - hdr_size)  # < 2**31: check_run
        payload_data = grid[:, hdr_size:].tobytes()
        payloads = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(payload_offsets),
                                                          pa.py_buffer(payload_data)])
        return np.ascontiguousarray(grid[:, :hdr_size]), payloads, payload_data
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    whole = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    headers = pc.binary_slice(whole, 0, hdr_size)
    header_bytes = np.frombuffer(headers.buffers()[2], dtype=np.uint8, count=n * hdr_size).reshape(n, hdr_size)
    payloads = pc.binary_slice(whole, hdr_size, _SLICE_TO_END)
    values = payloads.buffers()[2]
    return header_bytes, payloads, values.to_pybytes() if values is not None else b""


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
    payloads = _cut(payload_data, payload_sizes)
    return np.fromiter((hmac.compare_digest(digest.compute(row[:HEADER_BYTES].tobytes(), p), row[HEADER_BYTES:].tobytes())
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


def decode_each(digest: Digest, scope_id: int, ledger_id: int, first_entry_id: int,
                entries: Sequence[bytes | memoryview]) -> tuple[list[pa.Buffer], str | None]:
    """The same checks as decode_run, entry by entry, for large entries (Arrow): each payload
    stays a zero-copy view of the bytes the bookie sent (entries may be views of a run) (decode_run would copy every byte twice
    to lay the entries end to end and cut the payloads out; for a few large entries the
    per-entry Python cost is nothing next to those copies)."""
    out: list[pa.Buffer] = []
    hdr_size = HEADER_BYTES + digest.size
    flags = flags_byte(digest)
    for i, x in enumerate(entries):
        eid = first_entry_id + i
        if len(x) < hdr_size:
            return out, f"entry {eid}: {len(x)} bytes is shorter than a header and digest"
        f, scope, lid, stored_eid, _lac, _length = _HEADER.unpack_from(x)
        if f != flags:
            return out, f"entry {eid}: unsupported entry format or digest (flags 0x{f:02x})"
        if (scope, lid, stored_eid) != (scope_id, ledger_id, eid):
            return out, f"entry {eid}: bytes belong to entry {stored_eid} of ledger {scope:016x}{lid:016x}"
        view = memoryview(x)
        if digest.size and not hmac.compare_digest(digest.compute(bytes(view[:HEADER_BYTES]), view[hdr_size:]),
                                                   view[HEADER_BYTES:hdr_size]):
            return out, f"entry {eid}: digest mismatch" + (" (wrong password?)" if digest.key else "")
        out.append(pa.py_buffer(x).slice(hdr_size))
    return out, None


# ---- raw logs ----------------------------------------------------------------------------------------


def raw_batch(place: RowPlace, first_entry_id: int, payloads: pa.Array,
              schema: pa.Schema = RAW_ARROW_SCHEMA) -> pa.RecordBatch:
    """Raw entries first_entry_id.. as rows: the payload, then where each is (rows.py). A keyed
    raw log (its schema has a key before the payload) has each entry's key cut off its front."""
    data = [payloads]
    if len(schema) > len(RAW_ARROW_SCHEMA):
        keys, payloads = keyed_entries.unframe(payloads)
        data = [keys.cast(schema.field(0).type), payloads]
    return pa.RecordBatch.from_arrays([*data, *raw_meta(place, first_entry_id, len(payloads))], schema=schema)


# ---- Arrow logs ---------------------------------------------------------------------------------------


def decode_arrow_entry(payload: pa.Buffer, place: RowPlace, entry_id: int, target: pa.Schema,
                       skip_rows: int = 0, keep_rows: int | None = None) -> Iterator[pa.RecordBatch]:
    """The record batches of one Arrow entry, with the metadata columns added (rows.py), in the
    exact target schema (Spark checks it). Only the entry's rows with skip_rows <= index <
    keep_rows (a read that starts or ends inside this entry). Zero-copy unless a column's type
    must be cast."""
    reader = pa.ipc.open_stream(payload)
    data_fields = list(target)[: len(target) - len(META_NAMES)]
    names = [f.name for f in data_fields]
    at = 0  # index in the entry of the batch's first row
    for batch in reader:
        if keep_rows is not None and at >= keep_rows:
            return
        if batch.schema.names != names:
            raise ValueError(f"entry {entry_id} of ledger {place.ledger} holds columns {batch.schema.names}, "
                             f"the log's schema has {names}")
        n = batch.num_rows
        lo, hi = max(0, skip_rows - at), n if keep_rows is None else min(n, keep_rows - at)
        at += n
        if hi <= lo:
            continue
        if (lo, hi) != (0, n):
            batch = batch.slice(lo, hi - lo)
        cols = list(batch.columns)
        for i, f in enumerate(data_fields):
            if cols[i].type != f.type:
                cols[i] = cols[i].cast(f.type)
        yield pa.RecordBatch.from_arrays(cols + entry_meta(place, entry_id, at - n + lo, hi - lo), schema=target)


def payload_buffers(payloads: pa.BinaryArray) -> Iterator[pa.Buffer]:
    """Each value of a binary array as a zero-copy buffer."""
    _, offsets_buf, data = payloads.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int32, count=len(payloads) + 1 + payloads.offset)[payloads.offset:]
    for i in range(len(payloads)):
        start = int(offsets[i])
        yield data.slice(start, int(offsets[i + 1]) - start)


class ArrowEntryPacker:
    """Packs incoming record batches into entries: at most rows_max rows and about
    ENTRY_PAYLOAD_BYTES_TARGET bytes each, every entry a complete Arrow IPC stream, compressed
    when that saves at least COMPRESSION_SAVINGS_MIN of its data bytes."""

    def __init__(self, schema: pa.Schema, rows_max: int, compression: str = "none",
                 bytes_target: int = ENTRY_PAYLOAD_BYTES_TARGET):
        self.schema = schema
        self.plain_options = pa.ipc.IpcWriteOptions(compression=None)
        self.compressed_options = None if compression == "none" else pa.ipc.IpcWriteOptions(compression=compression)
        self.rows_max = rows_max
        self.bytes_target = bytes_target
        self.entries_compressed = 0
        self.entries_plain = 0
        self._parts: list[pa.RecordBatch] = []
        self._rows = 0
        self._row_cap = rows_max
        self._plain_until_retry = 0  # entries to store plain before trying compression again

    def add(self, batch: pa.RecordBatch) -> Iterator[pa.Buffer]:
        if batch.num_rows == 0:
            return
        if batch.schema != self.schema:
            batch = pa.RecordBatch.from_arrays(batch.columns, schema=self.schema)
        # Rows per entry from this batch's average row size, so an entry stays near the target.
        per_row = max(1, batch.nbytes // batch.num_rows)
        self._row_cap = max(1, min(self.rows_max, self.bytes_target // per_row))
        at = 0
        while at < batch.num_rows:
            take = min(self._row_cap - self._rows, batch.num_rows - at)
            self._parts.append(batch.slice(at, take))
            self._rows += take
            at += take
            if self._rows >= self._row_cap:
                yield self._encode()

    def flush(self) -> Iterator[pa.Buffer]:
        if self._rows:
            yield self._encode()

    def _encode(self) -> pa.Buffer:
        parts, self._parts, self._rows = self._parts, [], 0
        if self.compressed_options is not None and self._plain_until_retry == 0:
            packed = self._write(parts, self.compressed_options)
            data_bytes = sum(p.nbytes for p in parts)  # what the plain entry carries (sliced: exact)
            if packed.size <= (1 - COMPRESSION_SAVINGS_MIN) * data_bytes:
                self.entries_compressed += 1
                return packed
            self._plain_until_retry = COMPRESSION_RETRY_ENTRIES
        elif self._plain_until_retry:
            self._plain_until_retry -= 1
        self.entries_plain += 1
        return self._write(parts, self.plain_options)

    def _write(self, parts: list[pa.RecordBatch], options: pa.ipc.IpcWriteOptions) -> pa.Buffer:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, self.schema, options=options) as w:
            for part in parts:
                w.write_batch(part)
        return sink.getvalue()
