"""Entries <-> Arrow, in bulk: no per-row Python objects on the read path.

Read side: a range of stored entries (as a bookie returns them) is verified and cut into
payloads with a handful of vectorised calls. The entries are laid end to end in one buffer and
seen as one Arrow binary array (zero copy); `binary_slice` cuts the headers and the payloads
out of it, numpy checks every header field at once, and only the digest is computed per entry
(one C call each). Raw payloads become the `payload` column as they are; Arrow payloads are
IPC streams opened zero-copy.

Write side: a task's record batches are packed into entries of at most `rows_max` rows and
about ENTRY_PAYLOAD_BYTES_TARGET bytes (before compression), each one Arrow IPC stream (schema
+ batches, buffers optionally LZ4- or ZSTD-compressed as the IPC format allows), so any single
entry is readable on its own by any Arrow IPC reader.

No pyspark here (pyarrow, numpy and the client's entry format only).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Iterator, Sequence

import crc32c
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metadata import DigestType
from pyspark_ledger.digest import Digest
from pyspark_ledger.entry_format import (  # noqa: PLC2701 - the one header layout
    _HEADER,
    FORMAT_VERSION,
    HEADER_BYTES,
    flags_byte,
)

# An Arrow entry aims at this size: far below the client's 4 MiB entry limit, large enough
# that the per-entry costs (header, digest, quorum round) vanish next to the bytes.
ENTRY_PAYLOAD_BYTES_TARGET = 2 * 2**20
# Cut payloads "to the end" with an explicit, safe stop (binary_slice's default overflows).
_SLICE_TO_END = 1 << 30

RAW_COLUMNS = ("ledger_scope_id", "ledger_id", "entry_id", "payload")
META_COLUMNS = ("ledger_id", "entry_id")  # added to every row of an Arrow log

RAW_ARROW_SCHEMA = pa.schema([
    pa.field("ledger_scope_id", pa.int64()),
    pa.field("ledger_id", pa.int64()),
    pa.field("entry_id", pa.int64()),
    pa.field("payload", pa.binary()),
])


def signed64(value: int) -> int:
    """An unsigned 64-bit id as Spark's bigint (two's complement): ids >= 2**63 read negative."""
    return value - (1 << 64) if value >= 1 << 63 else value


def constant_int64(value: int, n: int) -> pa.Array:
    return pa.array(np.full(n, value, dtype=np.int64))


def entry_id_column(first: int, n: int) -> pa.Array:
    return pa.array(np.arange(first, first + n, dtype=np.int64))


# ---- verifying stored entries in bulk --------------------------------------------------------------


@dataclass(frozen=True)
class DecodedRun:
    """The verified prefix of a run of entries first..first+count-1, and why it stopped early."""

    first_entry_id: int
    payloads: "pa.BinaryArray | list[pa.Buffer]"  # one per verified entry (a list: decode_each)
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


def decode_run(digest: Digest, scope_id: int, ledger_id: int, first_entry_id: int,
               entries: Sequence[bytes]) -> DecodedRun:
    """Verify consecutive stored entries (first_entry_id, first_entry_id+1, ...) exactly as
    pyspark_ledger.entry_format.decode_entry does, but in bulk. Returns the payloads of the
    longest valid prefix; `error` says what was wrong with the first bad entry, if any."""
    n = len(entries)
    if n == 0:
        return DecodedRun(first_entry_id, pa.array([], pa.binary()))
    hdr_size = HEADER_BYTES + digest.size
    lens = np.fromiter(map(len, entries), dtype=np.int64, count=n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    if offsets[-1] >= 2**31:
        raise ValueError(f"a run of {offsets[-1]} bytes is too large for one binary array")
    ok = lens >= hdr_size
    valid = int(n if ok.all() else np.argmin(ok))
    error = None if valid == n else f"entry {first_entry_id + valid}: {int(lens[valid])} bytes is shorter than a header and digest"
    if valid == 0:
        return DecodedRun(first_entry_id, pa.array([], pa.binary()), error)
    whole = pa.Array.from_buffers(pa.binary(), valid, [None, pa.py_buffer(offsets[: valid + 1].astype(np.int32)),
                                                       pa.py_buffer(b"".join(entries[:valid]))])
    headers = pc.binary_slice(whole, 0, hdr_size)
    rec = np.frombuffer(headers.buffers()[2], dtype=_header_dtype(digest), count=valid)
    flags_ok = rec["flags"] == flags_byte(digest)
    ids_ok = (rec["scope"] == scope_id) & (rec["ledger"] == ledger_id) & (
        rec["entry"] == np.arange(first_entry_id, first_entry_id + valid, dtype=np.int64))
    good = flags_ok & ids_ok
    if digest.type is DigestType.CRC32C:
        c = crc32c.crc32c
        items = entries[:valid] if isinstance(entries, list) else list(entries[:valid])
        computed = np.fromiter((c(x[hdr_size:], c(x[:HEADER_BYTES])) for x in items), dtype=np.uint32, count=valid)
        good &= computed == rec["crc"]
    elif digest.type is DigestType.MAC:
        for i, x in enumerate(entries[:valid]):
            if good[i] and not hmac.compare_digest(digest.compute(x[:HEADER_BYTES], x[hdr_size:]), x[HEADER_BYTES:hdr_size]):
                good[i] = False
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
        error, valid = f"entry {eid}: {why}", bad
        whole = whole.slice(0, valid)
    payloads = pc.binary_slice(whole, hdr_size, _SLICE_TO_END)
    return DecodedRun(first_entry_id, payloads, error)


def decode_each(digest: Digest, scope_id: int, ledger_id: int, first_entry_id: int,
                entries: Sequence[bytes]) -> tuple[list[pa.Buffer], str | None]:
    """The same checks as decode_run, entry by entry, for large entries (Arrow): each payload
    stays a zero-copy view of the bytes the bookie sent (decode_run would copy every byte twice
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
        if digest.size and not hmac.compare_digest(digest.compute(x[:HEADER_BYTES], view[hdr_size:]),
                                                   view[HEADER_BYTES:hdr_size]):
            return out, f"entry {eid}: digest mismatch" + (" (wrong password?)" if digest.key else "")
        out.append(pa.py_buffer(x).slice(hdr_size))
    return out, None


# ---- raw logs ----------------------------------------------------------------------------------------


def raw_batch(scope_id: int, ledger_id: int, first_entry_id: int, payloads: pa.Array,
              schema: pa.Schema = RAW_ARROW_SCHEMA) -> pa.RecordBatch:
    n = len(payloads)
    return pa.RecordBatch.from_arrays(
        [constant_int64(signed64(scope_id), n), constant_int64(signed64(ledger_id), n),
         entry_id_column(first_entry_id, n), payloads],
        schema=schema,
    )


# ---- Arrow logs ---------------------------------------------------------------------------------------


def arrow_read_schema(data_schema: pa.Schema) -> pa.Schema:
    """The schema of an Arrow log as read: the written columns plus ledger_id and entry_id."""
    return pa.schema(list(data_schema) + [pa.field("ledger_id", pa.int64()), pa.field("entry_id", pa.int64())])


def decode_arrow_entry(payload: pa.Buffer, ledger_id: int, entry_id: int, target: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The record batches of one Arrow entry, with ledger_id and entry_id added, in the exact
    target schema (Spark checks it). Zero-copy unless a column's type must be cast."""
    reader = pa.ipc.open_stream(payload)
    data_fields = list(target)[: len(target) - len(META_COLUMNS)]
    names = [f.name for f in data_fields]
    lid = signed64(ledger_id)
    for batch in reader:
        if batch.schema.names != names:
            raise ValueError(f"entry {entry_id} of ledger {ledger_id} holds columns {batch.schema.names}, the log's schema has {names}")
        cols = list(batch.columns)
        for i, f in enumerate(data_fields):
            if cols[i].type != f.type:
                cols[i] = cols[i].cast(f.type)
        n = batch.num_rows
        yield pa.RecordBatch.from_arrays(cols + [constant_int64(lid, n), constant_int64(entry_id, n)], schema=target)


def payload_buffers(payloads: pa.BinaryArray) -> Iterator[pa.Buffer]:
    """Each value of a binary array as a zero-copy buffer."""
    _, offsets_buf, data = payloads.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int32, count=len(payloads) + 1 + payloads.offset)[payloads.offset:]
    for i in range(len(payloads)):
        start = int(offsets[i])
        yield data.slice(start, int(offsets[i + 1]) - start)


class ArrowEntryPacker:
    """Packs incoming record batches into entries: at most rows_max rows and about
    ENTRY_PAYLOAD_BYTES_TARGET bytes each, every entry a complete Arrow IPC stream."""

    def __init__(self, schema: pa.Schema, rows_max: int, compression: str = "none",
                 bytes_target: int = ENTRY_PAYLOAD_BYTES_TARGET):
        self.schema = schema
        self.ipc_options = pa.ipc.IpcWriteOptions(compression=None if compression == "none" else compression)
        self.rows_max = rows_max
        self.bytes_target = bytes_target
        self._parts: list[pa.RecordBatch] = []
        self._rows = 0
        self._row_cap = rows_max

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
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, self.schema, options=self.ipc_options) as w:
            for part in self._parts:
                w.write_batch(part)
        self._parts, self._rows = [], 0
        return sink.getvalue()
