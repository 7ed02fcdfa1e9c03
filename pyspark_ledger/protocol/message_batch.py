"""The message batch: the payload of a version-3 entry (docs/entry-format.md, "Message batches").

Many small messages travel as one entry (Pulsar's batch messages, Kafka's record batches), so
the per-entry cost of the protocol (digest, pending add, acks on three bookies) is paid once per
batch. The layout is columnar so that both sides work in bulk: the writer packs each column with
one C-level pass (array), the reader unpacks each with one numpy view; no Python object per
message is made until a caller asks for one message.

    offset  size  field (all integers big-endian)
    0       4     count n (u32), 1..MESSAGES_PER_ENTRY_MAX
    4       1     layout flags: bit 0 keys, bit 1 event times, bit 2 headers; other bits 0
    5       3     reserved, 0
    8       4n    message lengths (u32)
    ..      8n    append times, ms since the epoch (i64)
    ..      8n    event times, ms (i64, NO_TIME = none)            [if bit 1]
    ..      4n    key lengths (i32, -1 = no key)                    [if bit 0]
    ..      2n    header counts (u16)                               [if bit 2]
    ..      2h    header key lengths (u16), h = sum of the counts   [if bit 2]
    ..      4h    header value lengths (u32)                        [if bit 2]
    then the bytes: keys, header keys (UTF-8), header values, payloads, each laid end to end.

The entry's digest covers the whole batch: there is no digest per message. No I/O here.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np

from pyspark_ledger.errors import EntryFormatError

# Bounds (every one named; a batch that passes them has a bounded size and decode cost).
MESSAGES_PER_ENTRY_MAX = 10_000
KEY_BYTES_MAX = 65_536
HEADERS_PER_MESSAGE_MAX = 64
HEADER_KEY_BYTES_MAX = 256
HEADER_VALUE_BYTES_MAX = 65_536
NO_TIME = -(2**63)  # an event time that was not given
TIME_MS_MAX = 2**63 - 1

KEYS, EVENT_TIMES, HEADERS = 0x01, 0x02, 0x04
_KNOWN_FLAGS = KEYS | EVENT_TIMES | HEADERS
_HEAD = struct.Struct(">IB3x")
HEAD_BYTES = _HEAD.size  # 8
_SWAP = sys.byteorder == "little"  # array packs in native order; the format is big-endian

Header = tuple[str, bytes]


class MessageBoundError(EntryFormatError):
    """A message or batch over one of this module's bounds (the message names the bound)."""


def _packed(typecode: str, values: Sequence[int] | Iterator[int]) -> bytes:
    a = array(typecode, values)
    if _SWAP:
        a.byteswap()
    return a.tobytes()


def check_key(key: bytes | None) -> None:
    if key is not None and len(key) > KEY_BYTES_MAX:
        raise MessageBoundError(f"message key of {len(key)} bytes exceeds KEY_BYTES_MAX ({KEY_BYTES_MAX})")


def checked_time_ms(ms: int) -> int:
    """An event time given to a writer: an integer of milliseconds that fits the column (i64,
    NO_TIME excluded), else MessageBoundError naming the bound."""
    t = int(ms)
    if not NO_TIME < t <= TIME_MS_MAX:
        raise MessageBoundError(f"event time {t} ms is outside the i64 column's range (above NO_TIME, at most TIME_MS_MAX)")
    return t


def check_headers(headers: Sequence[Header]) -> None:
    """A message's headers: at most HEADERS_PER_MESSAGE_MAX (str, bytes) pairs, duplicates kept."""
    if len(headers) > HEADERS_PER_MESSAGE_MAX:
        raise MessageBoundError(f"{len(headers)} headers exceed HEADERS_PER_MESSAGE_MAX ({HEADERS_PER_MESSAGE_MAX})")
    for pair in headers:
        if len(pair) != 2 or not isinstance(pair[0], str) or not isinstance(pair[1], (bytes, bytearray)):
            raise MessageBoundError(f"a header is a (str, bytes) pair, not {pair!r}")
        k = len(pair[0].encode())
        if k > HEADER_KEY_BYTES_MAX:
            raise MessageBoundError(f"header key of {k} bytes exceeds HEADER_KEY_BYTES_MAX ({HEADER_KEY_BYTES_MAX})")
        if len(pair[1]) > HEADER_VALUE_BYTES_MAX:
            raise MessageBoundError(
                f"header value of {len(pair[1])} bytes exceeds HEADER_VALUE_BYTES_MAX ({HEADER_VALUE_BYTES_MAX})")


def plain_headers_bytes(headers: tuple[Header, ...]) -> int:
    """What one message's headers add to a batch (its count (2), and per header two lengths (6)
    and its key and value bytes) when they are the common case: a few tuples of exactly str
    (ASCII) and bytes, within the bounds; -1 when they are not (headers_bytes then decides).
    Headers of this case are immutable all through, so equal ones need no second check.
    Costs no encoding and no call: this runs once per message on the producer's thread."""
    size = 2
    try:
        if len(headers) > HEADERS_PER_MESSAGE_MAX:
            return -1
        for pair in headers:  # immutable pairs only: a caller may keep equal ones (batching.py)
            if type(pair) is not tuple:
                return -1
            k, v = pair
            if type(v) is not bytes or type(k) is not str or len(v) > HEADER_VALUE_BYTES_MAX \
                    or len(k) > HEADER_KEY_BYTES_MAX or not k.isascii():
                return -1
            size += 6 + len(k) + len(v)
    except (ValueError, TypeError):  # not a sequence of pairs
        return -1
    return size


def headers_bytes(headers: tuple[Header, ...]) -> int:
    """Check one message's headers (as check_headers) and return what they add to a batch."""
    size = plain_headers_bytes(headers)
    if size < 0:  # not the common case: the full check raises, naming the bound, or accepts
        check_headers(headers)  # (bytearray values, non-ASCII keys within the bounds)
        size = 2 + sum(6 + len(k.encode()) + len(v) for k, v in headers)
    return size


def _header_columns(headers: Sequence[Sequence[Header]], uniform: bool = False) -> tuple[list[bytes], list[bytes]]:
    """The header columns and bytes of a batch, in bulk (C-level passes: chain, zip, map, join);
    ASCII keys are encoded as one string. `uniform`: every message has the first one's headers
    (a producer's constant headers), so each column is the first message's, repeated."""
    if uniform and len(headers) > 1:
        columns, data = _header_columns(headers[:1])
        n = len(headers)
        return [c * n for c in columns], [d * n for d in data]
    flat = list(chain.from_iterable(headers))
    names: Sequence[str] = ()
    values: Sequence[bytes] = ()
    if flat:
        names, values = zip(*flat)
    joined = "".join(names)
    if joined.isascii():
        name_lengths: Iterator[int] = map(len, names)
        name_bytes = joined.encode()
    else:
        encoded = [k.encode() for k in names]
        name_lengths, name_bytes = map(len, encoded), b"".join(encoded)
    columns = [_packed("H", map(len, headers)), _packed("H", name_lengths), _packed("I", map(len, values))]
    return columns, [name_bytes, b"".join(values)]


def encode_batch(payloads: Sequence[bytes], append_ms: Sequence[int], *, keys: Sequence[bytes | None] | None = None,
                 event_ms: Sequence[int] | None = None, headers: Sequence[Sequence[Header]] | None = None,
                 checked: bool = False, headers_uniform: bool = False) -> bytes:
    """One batch of len(payloads) messages. keys/event_ms/headers are None when no message has
    one (the common case costs no column); else one value per message (None, NO_TIME, ()).
    checked: the caller checked every key and header against the bounds already (a LogWriter
    does, message by message, so that the message's own append fails). headers_uniform: the
    caller knows every message's headers equal the first message's (encoded once, repeated)."""
    n = len(payloads)
    if not 1 <= n <= MESSAGES_PER_ENTRY_MAX:
        raise MessageBoundError(f"a batch holds 1..MESSAGES_PER_ENTRY_MAX ({MESSAGES_PER_ENTRY_MAX}) messages, not {n}")
    for name, column in (("append times", append_ms), ("keys", keys), ("event times", event_ms), ("headers", headers)):
        if column is not None and len(column) != n:
            raise EntryFormatError(f"{len(column)} {name} for {n} messages")
    flags = (KEYS if keys is not None else 0) | (EVENT_TIMES if event_ms is not None else 0) | \
        (HEADERS if headers is not None else 0)
    parts = [_HEAD.pack(n, flags), _packed("I", map(len, payloads)), _packed("q", append_ms)]
    if event_ms is not None:
        parts.append(_packed("q", event_ms))
    data: list[bytes] = []
    if keys is not None:
        if not checked:
            for k in keys:
                check_key(k)
        parts.append(_packed("i", (-1 if k is None else len(k) for k in keys)))
        data.append(b"".join(k for k in keys if k is not None))
    if headers is not None:
        if not checked:
            for hs in headers:
                check_headers(hs)
        # Checked on small batches only (tests): on a full one it would cost what the hint saves.
        assert not headers_uniform or n > 64 or headers.count(headers[0]) == n, "headers_uniform, yet they differ"
        columns, header_data = _header_columns(headers, headers_uniform)
        parts += columns
        data += header_data
    return b"".join(parts + data + list(payloads))


@dataclass(frozen=True, slots=True)
class MessageBatch:
    """A decoded batch: columns as numpy arrays, bytes as one buffer; messages made on demand."""

    count: int
    payload_starts: np.ndarray  # int64, count + 1 offsets into `data`
    append_ms: np.ndarray  # int64
    event_ms: np.ndarray | None  # int64, NO_TIME = none; None: no message has one
    key_starts: np.ndarray | None  # int64, count + 1 offsets; a key of length -1 is absent
    key_lengths: np.ndarray | None  # int32
    header_counts: np.ndarray | None  # int64 cumulative, count + 1
    header_key_starts: np.ndarray | None
    header_value_starts: np.ndarray | None
    data: memoryview

    def payload(self, i: int) -> bytes:
        return bytes(self.data[int(self.payload_starts[i]):int(self.payload_starts[i + 1])])

    def payloads(self, first: int = 0) -> list[bytes]:
        """The payloads from message `first` on, in one pass."""
        starts = self.payload_starts[first:].tolist()
        d = self.data
        return [bytes(d[a:b]) for a, b in zip(starts, starts[1:])]

    def key(self, i: int) -> bytes | None:
        if self.key_starts is None or self.key_lengths is None or self.key_lengths[i] < 0:
            return None
        return bytes(self.data[int(self.key_starts[i]):int(self.key_starts[i + 1])])

    def event_time_ms(self, i: int) -> int | None:
        if self.event_ms is None or self.event_ms[i] == NO_TIME:
            return None
        return int(self.event_ms[i])

    def headers(self, i: int) -> list[Header]:
        if self.header_counts is None or self.header_key_starts is None or self.header_value_starts is None:
            return []
        ks, vs, d = self.header_key_starts, self.header_value_starts, self.data
        return [(bytes(d[int(ks[j]):int(ks[j + 1])]).decode(), bytes(d[int(vs[j]):int(vs[j + 1])]))
                for j in range(int(self.header_counts[i]), int(self.header_counts[i + 1]))]


class _Cursor:
    """Reads the columns of one batch in order, checking each fits in the bytes."""

    def __init__(self, data: memoryview, where: str):
        self.data, self.at, self.where = data, HEAD_BYTES, where

    def column(self, dtype: str, n: int) -> np.ndarray:
        size = np.dtype(dtype).itemsize * n
        if self.at + size > len(self.data):
            raise EntryFormatError(f"{self.where}: message batch truncated in its columns")
        col = np.frombuffer(self.data, dtype=dtype, count=n, offset=self.at)
        self.at += size
        return col

    def region(self, lengths: np.ndarray) -> np.ndarray:
        """Offsets (len + 1) of consecutive byte strings of `lengths`, starting at the cursor."""
        starts = np.empty(len(lengths) + 1, dtype=np.int64)
        starts[0] = self.at
        np.cumsum(lengths, dtype=np.int64, out=starts[1:])
        starts[1:] += self.at
        self.at = int(starts[-1])
        if self.at > len(self.data):
            raise EntryFormatError(f"{self.where}: message batch shorter than its lengths say")
        return starts


def decode_batch(payload: bytes | memoryview, where: str = "entry") -> MessageBatch:
    """Check and unpack one batch (the entry's digest was checked already): every length must
    add up to exactly the bytes there are, and every bound holds."""
    data = memoryview(payload)
    if len(data) < HEAD_BYTES:
        raise EntryFormatError(f"{where}: {len(data)} bytes is shorter than a message batch head")
    n, flags = _HEAD.unpack_from(data)
    if not 1 <= n <= MESSAGES_PER_ENTRY_MAX:
        raise EntryFormatError(f"{where}: message batch count {n} outside 1..{MESSAGES_PER_ENTRY_MAX}")
    if flags & ~_KNOWN_FLAGS or bytes(data[5:8]) != b"\0\0\0":
        raise EntryFormatError(f"{where}: message batch layout 0x{flags:02x} unknown to this release")
    cur = _Cursor(data, where)
    lengths = cur.column(">u4", n)
    append_ms = cur.column(">i8", n).astype(np.int64)
    event_ms = cur.column(">i8", n).astype(np.int64) if flags & EVENT_TIMES else None
    key_lengths = cur.column(">i4", n).astype(np.int32) if flags & KEYS else None
    hcounts = hk_len = hv_len = None
    if flags & HEADERS:
        hcounts = cur.column(">u2", n)
        if int(hcounts.max()) > HEADERS_PER_MESSAGE_MAX:
            raise EntryFormatError(f"{where}: a message has more than {HEADERS_PER_MESSAGE_MAX} headers")
        h = int(hcounts.sum())
        hk_len, hv_len = cur.column(">u2", h), cur.column(">u4", h)
        if h and (int(hk_len.max()) > HEADER_KEY_BYTES_MAX or int(hv_len.max()) > HEADER_VALUE_BYTES_MAX):
            raise EntryFormatError(f"{where}: a header exceeds its size bound")
    key_starts = None
    if key_lengths is not None:
        if int(key_lengths.min()) < -1 or int(key_lengths.max()) > KEY_BYTES_MAX:
            raise EntryFormatError(f"{where}: a message key length is outside -1..{KEY_BYTES_MAX}")
        key_starts = cur.region(np.maximum(key_lengths, 0))
    header_counts = hk_starts = hv_starts = None
    if hcounts is not None and hk_len is not None and hv_len is not None:
        header_counts = np.concatenate(([0], np.cumsum(hcounts, dtype=np.int64)))
        hk_starts, hv_starts = cur.region(hk_len), cur.region(hv_len)
    payload_starts = cur.region(lengths)
    if cur.at != len(data):
        raise EntryFormatError(f"{where}: message batch has {len(data) - cur.at} bytes past its last message")
    return MessageBatch(n, payload_starts, append_ms, event_ms, key_starts, key_lengths, header_counts, hk_starts,
                        hv_starts, data)
