"""A raw write's rows -> message batches (entry format 3, protocol/message_batch.py), in bulk.

The batch layout is columnar, so a batch of Arrow rows is a handful of numpy operations: the
lengths column from the binary array's offsets, one append time repeated, the key lengths
(-1 for a null key), then the keys' and payloads' bytes, each one contiguous slice of the
Arrow data buffer. Where one batch ends is found for all rows at once (a cumulative sum of the
rows' sizes); only the batches themselves are a Python loop, never the rows. The output is
byte for byte what message_batch.encode_batch makes of the same messages (tests check it).

A batch holds at most `max_messages` rows and about `max_bytes` bytes (a row larger than that
goes in a batch of its own). No pyspark here.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from pyspark_ledger.protocol.message_batch import (
    EVENT_TIMES,
    HEAD_BYTES,
    HEADER_KEY_BYTES_MAX,
    HEADER_VALUE_BYTES_MAX,
    HEADERS,
    HEADERS_PER_MESSAGE_MAX,
    KEYS,
    MESSAGES_PER_ENTRY_MAX,
    MessageBoundError,
)

_HEAD = struct.Struct(">IB3x")
_PER_MESSAGE_BYTES = 4 + 8  # a length and an append time
_PER_KEY_BYTES = 4  # a key length
# The client's entry limit is 4 MiB; a batch stays well below it.
BATCH_BYTES_MAX = 2 * 2**20
BATCH_MESSAGES_DEFAULT = MESSAGES_PER_ENTRY_MAX
BATCH_BYTES_DEFAULT = 1 * 2**20


@dataclass(frozen=True, slots=True)
class BatchLimits:
    max_messages: int = BATCH_MESSAGES_DEFAULT
    max_bytes: int = BATCH_BYTES_DEFAULT

    def __post_init__(self) -> None:
        if not 1 <= self.max_messages <= MESSAGES_PER_ENTRY_MAX:
            raise ValueError(f"max_messages {self.max_messages} outside 1..{MESSAGES_PER_ENTRY_MAX}")
        if not 1 <= self.max_bytes <= BATCH_BYTES_MAX:
            raise ValueError(f"max_bytes {self.max_bytes} outside 1..{BATCH_BYTES_MAX}")


def _offsets(arr: pa.BinaryArray) -> np.ndarray:
    """The array's n + 1 value offsets (int64), absolute in its data buffer."""
    buf = arr.buffers()[1]
    if buf is None:  # an empty array
        return np.zeros(1, dtype=np.int64)
    return np.frombuffer(buf, dtype=np.int32, count=len(arr) + 1 + arr.offset)[arr.offset:].astype(np.int64)


def _data(arr: pa.BinaryArray) -> memoryview:
    buf = arr.buffers()[2]
    return memoryview(buf) if buf is not None else memoryview(b"")


def cut_points(row_bytes: np.ndarray, limits: BatchLimits) -> list[int]:
    """Where batches end (exclusive row numbers, the last = len(row_bytes)): each batch at most
    max_messages rows and max_bytes bytes, at least one row."""
    n = len(row_bytes)
    ends = np.cumsum(row_bytes, dtype=np.int64)
    out: list[int] = []
    at, before = 0, 0
    for _ in range(n):  # one pass per batch, bounded by the rows
        if at >= n:
            break
        fit = int(np.searchsorted(ends, before + limits.max_bytes - HEAD_BYTES, side="right"))
        end = min(n, at + limits.max_messages, max(fit, at + 1))
        out.append(end)
        before, at = int(ends[end - 1]), end
    return out


@dataclass(frozen=True, slots=True)
class Stamps:
    """Per-row event times and headers of a raw write (options eventTimeColumn, the `headers`
    column), None where the write has none."""

    event_ms: np.ndarray | None = None  # int64 per row, NO_TIME: none
    headers: pa.ListArray | None = None  # list<struct<key: string, value: binary>> per row

    def slice(self, at: int) -> Stamps:
        return Stamps(self.event_ms[at:] if self.event_ms is not None else None,
                      self.headers.slice(at) if self.headers is not None else None)


class _HeaderColumns:
    """A headers array's batch columns, in bulk: per row its count and bytes, per header its key
    and value lengths and bytes (views of the Arrow buffers), every bound checked at once."""

    def __init__(self, headers: pa.ListArray):
        offsets = np.asarray(headers.offsets, dtype=np.int64)
        counts = np.diff(offsets)
        if headers.null_count:
            nulls = np.asarray(headers.is_null())
            if counts[nulls].any():
                raise ValueError("a null headers value holds headers in its Arrow buffers; write [] instead")
        pairs = headers.values
        keys, values = pairs.field("key"), pairs.field("value")
        if keys.null_count or values.null_count:
            raise ValueError("a header key or value is null: every header is a (string key, binary value) pair")
        self.k_off, self.k_data = _offsets(keys), _data(keys)
        self.v_off, self.v_data = _offsets(values), _data(values)
        self.k_len, self.v_len = np.diff(self.k_off), np.diff(self.v_off)
        for what, got, bound, name in ((counts, "headers of a row", HEADERS_PER_MESSAGE_MAX, "HEADERS_PER_MESSAGE_MAX"),
                                       (self.k_len, "header key bytes", HEADER_KEY_BYTES_MAX, "HEADER_KEY_BYTES_MAX"),
                                       (self.v_len, "header value bytes", HEADER_VALUE_BYTES_MAX,
                                        "HEADER_VALUE_BYTES_MAX")):
            if len(what) and int(what.max()) > bound:
                raise MessageBoundError(f"{int(what.max())} {got} exceed {name} ({bound})")
        self.offsets, self.counts = offsets, counts
        cum = np.concatenate(([0], np.cumsum(6 + self.k_len + self.v_len)))
        self.row_bytes = 2 + cum[offsets[1:]] - cum[offsets[:-1]]

    def parts(self, at: int, end: int) -> tuple[list[bytes], list[memoryview]]:
        h0, h1 = int(self.offsets[at]), int(self.offsets[end])
        columns = [self.counts[at:end].astype(">u2").tobytes(), self.k_len[h0:h1].astype(">u2").tobytes(),
                   self.v_len[h0:h1].astype(">u4").tobytes()]
        return columns, [self.k_data[int(self.k_off[h0]):int(self.k_off[h1])],
                         self.v_data[int(self.v_off[h0]):int(self.v_off[h1])]]


def pack_batches(payloads: pa.BinaryArray, keys: pa.BinaryArray | None, append_ms: int,
                 limits: BatchLimits, *, hold_last: bool = False, stamps: Stamps | None = None) -> tuple[list[bytes], int]:
    """The rows as message batches, in order (keys None: the batches carry no keys column), and
    how many rows they hold: all of them, or (hold_last) all but the last batch's, which a
    writer keeps to fill up with the next rows it is given (Spark hands a task its rows in
    record batches that need not end where a message batch does). `stamps`: each row's event
    time and headers, packed as their columns."""
    out: list[bytes] = []
    ends = _pack(payloads, keys, append_ms, limits, out, stamps or Stamps())
    if hold_last and ends:
        out.pop()
        return out, ends[-2] if len(ends) > 1 else 0
    return out, len(payloads)


def _pack(payloads: pa.BinaryArray, keys: pa.BinaryArray | None, append_ms: int, limits: BatchLimits,
          out: list[bytes], stamps: Stamps) -> list[int]:
    """Append the batches to `out`; return where each ends."""
    n = len(payloads)
    if keys is not None and len(keys) != n:
        raise ValueError(f"{len(keys)} keys for {n} payloads")
    if payloads.null_count:
        raise ValueError("a message batch needs a payload in every row")
    p_off, p_data = _offsets(payloads), _data(payloads)
    p_len = np.diff(p_off)
    row_bytes = p_len + _PER_MESSAGE_BYTES
    if keys is not None:
        k_off, k_data = _offsets(keys), _data(keys)
        k_len = np.where(np.asarray(keys.is_null()), -1, np.diff(k_off))
        row_bytes = row_bytes + np.maximum(k_len, 0) + _PER_KEY_BYTES
    events = stamps.event_ms
    if events is not None:
        row_bytes = row_bytes + 8
    hc = _HeaderColumns(stamps.headers) if stamps.headers is not None else None
    if hc is not None:
        row_bytes = row_bytes + hc.row_bytes
    flags = (KEYS if keys is not None else 0) | (EVENT_TIMES if events is not None else 0) | (HEADERS if hc else 0)
    at = 0
    ends = cut_points(row_bytes, limits)
    for end in ends:
        count = end - at
        parts: list[bytes | memoryview] = [_HEAD.pack(count, flags), p_len[at:end].astype(">u4").tobytes(),
                                           np.full(count, append_ms, dtype=">i8").tobytes()]
        if events is not None:
            parts.append(events[at:end].astype(">i8").tobytes())
        data: list[bytes | memoryview] = []
        if keys is not None:
            parts.append(k_len[at:end].astype(">i4").tobytes())
            data.append(k_data[int(k_off[at]):int(k_off[end])])  # null keys hold no bytes
        if hc is not None:
            columns, header_data = hc.parts(at, end)
            parts += columns
            data += header_data
        out.append(b"".join([*parts, *data, p_data[int(p_off[at]):int(p_off[end])]]))
        at = end
    return ends
