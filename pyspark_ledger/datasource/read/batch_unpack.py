"""Batched raw entries (entry format 3, protocol/message_batch.py) -> rows, in bulk.

Each verified entry's payload is one message batch; decode_batch reads its columns as numpy
views, and its messages become a binary array over the entry's own bytes (offsets from the
batch's lengths, the data buffer the bytes gRPC received: no copy, and no Python per message).
Entries with few messages are joined into batches of about ROWS_TARGET rows (one C-level copy),
so Spark is not handed thousands of tiny batches. A read that starts or ends inside an entry
(LedgerRange.skip_rows / keep_rows: a position's index) slices it.

Rows keep their place: `entry` is the entry's id and `index` the message's place in its batch.
No pyspark here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from pyspark_ledger.protocol.message_batch import decode_batch

# Rows per output batch when entries are small (Spark's own arrowBatchRows default is 8,192).
ROWS_TARGET = 8_192


@dataclass(frozen=True, slots=True)
class EntryRows:
    """The messages index first_index.. of one batched entry, as Arrow arrays."""

    entry_id: int
    first_index: int
    payloads: pa.BinaryArray
    keys: pa.BinaryArray | None  # None: the batch carries no keys

    def __len__(self) -> int:
        return len(self.payloads)


def _binary(n: int, starts: np.ndarray, data: pa.Buffer) -> pa.BinaryArray:
    """n values data[starts[i]:starts[i+1]], zero-copy (the offsets are made, not the bytes)."""
    offsets = np.ascontiguousarray(starts, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), data])


def unpack_entry(payload: pa.Buffer, entry_id: int, skip: int = 0, keep: int | None = None,
                 where: str = "entry") -> EntryRows:
    """Messages skip..keep-1 (keep None: to the end) of one entry's batch."""
    if payload.size >= 2**31:
        raise ValueError(f"{where}: a batch of {payload.size} bytes is too large for one binary array")
    batch = decode_batch(memoryview(payload), where)
    n = batch.count
    payloads = _binary(n, batch.payload_starts, payload)
    keys = None
    if batch.key_starts is not None and batch.key_lengths is not None:
        keys = _binary(n, batch.key_starts, payload)
        absent = batch.key_lengths < 0
        if absent.any():
            keys = pa.Array.from_buffers(pa.binary(), n, [pa.array(~absent).buffers()[1], *keys.buffers()[1:]])
    lo, hi = min(skip, n), n if keep is None else min(n, keep)
    if (lo, hi) != (0, n):
        payloads = payloads.slice(lo, max(0, hi - lo))
        keys = keys.slice(lo, max(0, hi - lo)) if keys is not None else None
    return EntryRows(entry_id, lo, payloads, keys)


@dataclass(frozen=True, slots=True)
class RowsBatch:
    """Rows of one or more consecutive entries: their arrays and each row's entry and index."""

    payloads: pa.Array
    keys: pa.Array | None
    entries: np.ndarray  # int64, one per row
    index: np.ndarray  # int32, one per row

    @property
    def single_entry(self) -> bool:
        return len(self.entries) == 0 or int(self.entries[0]) == int(self.entries[-1])


def _joined(group: list[EntryRows]) -> RowsBatch:
    counts = np.array([len(g) for g in group], dtype=np.int64)
    entries = np.repeat(np.array([g.entry_id for g in group], dtype=np.int64), counts)
    # index: per entry first_index, first_index + 1, ...: a global arange minus each entry's start.
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    firsts = np.repeat(np.array([g.first_index for g in group], dtype=np.int64), counts)
    index = (np.arange(int(counts.sum()), dtype=np.int64) - starts + firsts).astype(np.int32)
    if len(group) == 1:
        return RowsBatch(group[0].payloads, group[0].keys, entries, index)
    payloads = pa.concat_arrays([g.payloads for g in group])
    key_parts = [g.keys for g in group]
    keys = None
    if any(k is not None for k in key_parts):
        keys = pa.concat_arrays([k if k is not None else pa.nulls(len(g), pa.binary()) for k, g in zip(key_parts, group)])
    return RowsBatch(payloads, keys, entries, index)


def grouped(entries: Iterable[EntryRows], rows_target: int = ROWS_TARGET) -> Iterator[RowsBatch]:
    """Consecutive entries joined until a batch holds at least rows_target rows (a large entry
    is a batch of its own, zero-copy); empty entries (sliced away) are dropped."""
    group: list[EntryRows] = []
    rows = 0
    for e in entries:
        if not len(e):
            continue
        group.append(e)
        rows += len(e)
        if rows >= rows_target:
            yield _joined(group)
            group, rows = [], 0
    if group:
        yield _joined(group)
