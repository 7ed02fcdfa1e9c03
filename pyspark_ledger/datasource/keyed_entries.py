"""Raw entries that carry a key: the framing, both ways, in bulk (numpy and Arrow kernels).

A raw log written from a DataFrame with a `key` column stores one entry per row, framed as

    key length   4 bytes, big-endian unsigned; 0xFFFFFFFF for a null key (then no key bytes)
    key          that many bytes (a string key is stored as its UTF-8 bytes)
    payload      the rest of the entry

and records the schema (key, payload) in the log (write/columns.py), so a read knows to cut the
key off again. Entries of a raw log without keys are the payload alone, as before: any client
reads them. No per-row Python on either side: frames are joined by Arrow's element-wise binary
join, and cut apart with a byte mask built from the lengths (a few passes over the bytes).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pyspark_ledger.errors import LedgerError

LENGTH_BYTES = 4
NULL_KEY = 0xFFFF_FFFF
_LENGTH_TYPE = np.dtype(">u4")


class KeyFramingError(LedgerError):
    """Stored entries that are not framed as keyed raw entries (e.g. appended by another client).
    `index`: the entry's place in the run unframed; `reason`: what is wrong with it."""

    def __init__(self, index: int, reason: str, where: str | None = None):
        super().__init__(f"{where or f'entry {index} of the run'} {reason}")
        self.index, self.reason, self.where = index, reason, where

    def __reduce__(self) -> tuple[type[KeyFramingError], tuple[int, str, str | None]]:
        return KeyFramingError, (self.index, self.reason, self.where)  # pickles with its own arguments


def _as_binary(arr: pa.Array) -> pa.Array:
    if pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type) or pa.types.is_string(arr.type):
        return arr.cast(pa.binary())
    return arr


def frame(keys: pa.Array, payloads: pa.Array) -> pa.BinaryArray:
    """One framed entry per row: the key's length, the key, the payload (payloads must be non-null)."""
    keys = _as_binary(keys)
    lengths = pc.binary_length(keys).to_numpy(zero_copy_only=False)
    nulls = np.asarray(keys.is_null())
    prefix = np.where(nulls, NULL_KEY, np.nan_to_num(lengths, nan=0)).astype(_LENGTH_TYPE)
    heads = pa.FixedSizeBinaryArray.from_buffers(pa.binary(LENGTH_BYTES), len(keys), [None, pa.py_buffer(prefix.tobytes())])
    # binary_join_element_wise: the last argument is the separator; a null key joins as empty bytes.
    joined = pc.binary_join_element_wise(heads.cast(pa.binary()), keys, _as_binary(payloads), b"",
                                         null_handling="replace", null_replacement=b"")
    return joined.cast(pa.binary()) if joined.type != pa.binary() else joined


def _region_mask(size: int, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """A boolean mask of `size` bytes that is True inside every [starts[i], ends[i])."""
    marks = np.zeros(size + 1, dtype=np.int8)
    np.add.at(marks, starts, 1)
    np.add.at(marks, ends, -1)
    return np.cumsum(marks[:-1], dtype=np.int8).astype(bool)


def _binary(values: np.ndarray, lengths: np.ndarray, valid: np.ndarray | None) -> pa.BinaryArray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    validity = None if valid is None or valid.all() else pa.array(valid).buffers()[1]
    return pa.Array.from_buffers(pa.binary(), len(lengths), [validity, pa.py_buffer(offsets), pa.py_buffer(values.tobytes())])


def unframe(entries: pa.Array) -> tuple[pa.BinaryArray, pa.BinaryArray]:
    """The keys (null where the frame says so) and the payloads of framed entries."""
    entries = _as_binary(entries)
    n = len(entries)
    if n == 0:
        return pa.array([], pa.binary()), pa.array([], pa.binary())
    _, offsets_buf, data_buf = entries.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int32, count=n + 1 + entries.offset)[entries.offset:].astype(np.int64)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    sizes = np.diff(offsets)
    if int(sizes.min()) < LENGTH_BYTES:
        bad = int(np.argmax(sizes < LENGTH_BYTES))
        raise KeyFramingError(bad, f"is {int(sizes[bad])} bytes, shorter than a key length")
    starts = offsets[:-1]
    heads = data[(starts[:, None] + np.arange(LENGTH_BYTES)).ravel()].view(_LENGTH_TYPE).astype(np.int64)
    valid = heads != NULL_KEY
    key_lengths = np.where(valid, heads, 0)
    if bool((key_lengths > sizes - LENGTH_BYTES).any()):
        bad = int(np.argmax(key_lengths > sizes - LENGTH_BYTES))
        raise KeyFramingError(bad, f"frames a {int(key_lengths[bad])}-byte key in {int(sizes[bad])} bytes: "
                              "not a keyed raw entry")
    key_starts = starts + LENGTH_BYTES
    key_ends = key_starts + key_lengths
    key_mask = _region_mask(len(data), key_starts, key_ends)
    payload_mask = _region_mask(len(data), key_ends, offsets[1:])
    keys = _binary(data[key_mask], key_lengths, valid)
    payloads = _binary(data[payload_mask], offsets[1:] - key_ends, None)
    return keys, payloads
