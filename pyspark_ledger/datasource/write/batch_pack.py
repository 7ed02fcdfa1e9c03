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

from pyspark_ledger.protocol.message_batch import HEAD_BYTES, KEYS, MESSAGES_PER_ENTRY_MAX

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


def pack_batches(payloads: pa.BinaryArray, keys: pa.BinaryArray | None, append_ms: int,
                 limits: BatchLimits, *, hold_last: bool = False) -> tuple[list[bytes], int]:
    """The rows as message batches, in order (keys None: the batches carry no keys column), and
    how many rows they hold: all of them, or (hold_last) all but the last batch's, which a
    writer keeps to fill up with the next rows it is given (Spark hands a task its rows in
    record batches that need not end where a message batch does)."""
    out: list[bytes] = []
    ends = _pack(payloads, keys, append_ms, limits, out)
    if hold_last and ends:
        out.pop()
        return out, ends[-2] if len(ends) > 1 else 0
    return out, len(payloads)


def _pack(payloads: pa.BinaryArray, keys: pa.BinaryArray | None, append_ms: int, limits: BatchLimits,
          out: list[bytes]) -> list[int]:
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
    at = 0
    ends = cut_points(row_bytes, limits)
    for end in ends:
        count = end - at
        head = _HEAD.pack(count, KEYS if keys is not None else 0)
        parts: list[bytes | memoryview] = [head, p_len[at:end].astype(">u4").tobytes(),
                                           np.full(count, append_ms, dtype=">i8").tobytes()]
        if keys is not None:
            parts.append(k_len[at:end].astype(">i4").tobytes())
            parts.append(k_data[int(k_off[at]):int(k_off[end])])  # null keys hold no bytes
        parts.append(p_data[int(p_off[at]):int(p_off[end])])
        out.append(b"".join(parts))
        at = end
    return ends
