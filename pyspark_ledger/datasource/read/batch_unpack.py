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

from pyspark_ledger.datasource.rows import HEADER_FIELDS, no_headers
from pyspark_ledger.protocol.message_batch import NO_TIME, MessageBatch, decode_batch

# Rows per output batch when entries are small (Spark's own arrowBatchRows default is 8,192).
ROWS_TARGET = 8_192


@dataclass(frozen=True, slots=True)
class EntryRows:
    """The messages index first_index.. of one batched entry, as Arrow arrays."""

    entry_id: int
    first_index: int
    payloads: pa.BinaryArray
    keys: pa.BinaryArray | None  # None: the batch carries no keys
    append_ms: np.ndarray  # int64, each message's append time
    event_ms: np.ndarray | None  # int64, NO_TIME where a message has none; None: no message has one
    headers: pa.ListArray | None  # list<struct<key, value>> per message; None: the batch carries none

    def __len__(self) -> int:
        return len(self.payloads)


def _binary(n: int, starts: np.ndarray, data: pa.Buffer) -> pa.BinaryArray:
    """n values data[starts[i]:starts[i+1]], zero-copy (the offsets are made, not the bytes)."""
    offsets = np.ascontiguousarray(starts, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), data])


def _stored(arr: pa.Array, index: np.ndarray | None) -> pa.Array:
    """One value per header: `arr` itself, or (a layout with shared header keys or values, each
    stored once) its values picked by `index`, in one C-level take."""
    return arr if index is None else arr.take(pa.array(index))


def _headers(batch: MessageBatch, data: pa.Buffer) -> pa.ListArray | None:
    """Each message's headers as list<struct<key: string, value: binary>>, in bulk: the list
    offsets are the batch's cumulative header counts, keys and values zero-copy views (or, shared
    once by the layout, taken per header)."""
    if batch.header_counts is None or batch.header_key_starts is None or batch.header_value_starts is None:
        return None
    k_off = np.ascontiguousarray(batch.header_key_starts, dtype=np.int32)
    keys = _stored(pa.Array.from_buffers(pa.string(), len(k_off) - 1, [None, pa.py_buffer(k_off), data]),
                   batch.header_key_index)
    values = _stored(_binary(len(batch.header_value_starts) - 1, batch.header_value_starts, data),
                     batch.header_value_index)
    pairs = pa.StructArray.from_arrays([keys, values], fields=list(HEADER_FIELDS))
    return pa.ListArray.from_arrays(pa.array(batch.header_counts.astype(np.int32)), pairs)


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
    headers = _headers(batch, payload)
    lo, hi = min(skip, n), n if keep is None else min(n, keep)
    append_ms, event_ms = batch.append_ms, batch.event_ms
    if (lo, hi) != (0, n):
        k = max(0, hi - lo)
        payloads = payloads.slice(lo, k)
        keys = keys.slice(lo, k) if keys is not None else None
        headers = headers.slice(lo, k) if headers is not None else None
        append_ms = append_ms[lo:lo + k]
        event_ms = event_ms[lo:lo + k] if event_ms is not None else None
    return EntryRows(entry_id, lo, payloads, keys, append_ms, event_ms, headers)


@dataclass(frozen=True, slots=True)
class RowsBatch:
    """Rows of one or more consecutive entries: their arrays and each row's entry and index."""

    payloads: pa.Array
    keys: pa.Array | None
    entries: np.ndarray  # int64, one per row
    index: np.ndarray  # int32, one per row
    append_ms: np.ndarray | None = None  # int64 per row (None: rows without times of their own)
    event_ms: np.ndarray | None = None  # int64 per row, NO_TIME where none; None: no row has one
    headers: pa.ListArray | None = None  # None: no row has headers

    @property
    def single_entry(self) -> bool:
        return len(self.entries) == 0 or int(self.entries[0]) == int(self.entries[-1])

    def times_ms(self, event: bool) -> np.ndarray | None:
        """Each row's time: its append time, or (event) its event time where it has one."""
        if self.append_ms is None or not event or self.event_ms is None:
            return self.append_ms
        return np.where(self.event_ms != NO_TIME, self.event_ms, self.append_ms)


def _joined(group: list[EntryRows]) -> RowsBatch:
    counts = np.array([len(g) for g in group], dtype=np.int64)
    entries = np.repeat(np.array([g.entry_id for g in group], dtype=np.int64), counts)
    # index: per entry first_index, first_index + 1, ...: a global arange minus each entry's start.
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    firsts = np.repeat(np.array([g.first_index for g in group], dtype=np.int64), counts)
    index = (np.arange(int(counts.sum()), dtype=np.int64) - starts + firsts).astype(np.int32)
    if len(group) == 1:
        g = group[0]
        return RowsBatch(g.payloads, g.keys, entries, index, g.append_ms, g.event_ms, g.headers)
    payloads = pa.concat_arrays([g.payloads for g in group])
    key_parts = [g.keys for g in group]
    keys = None
    if any(k is not None for k in key_parts):
        keys = pa.concat_arrays([k if k is not None else pa.nulls(len(g), pa.binary()) for k, g in zip(key_parts, group)])
    append_ms = np.concatenate([g.append_ms for g in group])
    event_ms = None
    if any(g.event_ms is not None for g in group):
        event_ms = np.concatenate([g.event_ms if g.event_ms is not None else np.full(len(g), NO_TIME, dtype=np.int64)
                                   for g in group])
    headers = None
    if any(g.headers is not None for g in group):
        headers = pa.concat_arrays([g.headers if g.headers is not None else no_headers(len(g)) for g in group])
    return RowsBatch(payloads, keys, entries, index, append_ms, event_ms, headers)


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
