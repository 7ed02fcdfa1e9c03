"""The message batch: the payload of a version-3 entry (docs/entry-format.md, "Message batches").

Many small messages travel as one entry (Pulsar's batch messages, Kafka's record batches), so
the per-entry cost of the protocol (digest, pending add, acks on three bookies) is paid once per
batch. The layout is columnar so that both sides work in bulk: the writer packs each column with
one C-level pass (array), the reader unpacks each with one numpy view; no Python object per
message is made until a caller asks for one message.

    offset  size  field (all integers big-endian)
    0       4     count n (u32), 1..MESSAGES_PER_ENTRY_MAX
    4       1     layout flags (LAYOUT_BITS); a reader refuses a bit it does not know
    5       3     reserved, 0
    8       4n    message lengths (u32)
    ..      8n    append times, ms since the epoch (i64); 8 with bit 3: one for all messages
    ..      8n    event times, ms (i64, NO_TIME = none)            [if bit 1]
                  with bit 4: 8 + 4n, a base (i64) and offsets from it (i32, NO_OFFSET = none)
    ..      4n    key lengths (i32, -1 = no key)                    [if bit 0]
    ..      2n    header counts (u16)                               [if bit 2]
    ..      2h    header key lengths (u16), h = sum of the counts   [if bit 2]
    ..      4h    header value lengths (u32)                        [if bit 2]
                  with bit 5 (every message has the same header keys, c of them): 2 (c), 2c key
                  lengths, 4cn value lengths; with bit 6 as well (the same headers): 4c
    then the bytes: keys, header keys (UTF-8; with bit 5 the c once), header values (with bit 6
    the c once), payloads, each laid end to end.

A LogWriter writes bits 3-6 where they apply (OpenBatch, encode_columns): a batch of stamped
100-byte messages then carries 4 bytes of event time per message, and constant headers once,
instead of 8 + 8 and all of them per message. encode_batch writes the plain layout (bits 0-2).

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
from pyspark_ledger.protocol.invariants import ensure

# Bounds (every one named; a batch that passes them has a bounded size and decode cost).
MESSAGES_PER_ENTRY_MAX = 10_000
KEY_BYTES_MAX = 65_536
HEADERS_PER_MESSAGE_MAX = 64
HEADER_KEY_BYTES_MAX = 256
HEADER_VALUE_BYTES_MAX = 65_536
NO_TIME = -(2**63)  # an event time that was not given
TIME_MS_MAX = 2**63 - 1

KEYS, EVENT_TIMES, HEADERS = 0x01, 0x02, 0x04
ONE_APPEND_TIME, EVENT_TIME_OFFSETS, SHARED_HEADER_KEYS, SHARED_HEADERS = 0x08, 0x10, 0x20, 0x40
# Every layout bit by name (the docs and a reader's refusal use these names), and the bit each needs.
LAYOUT_BITS = {KEYS: "keys", EVENT_TIMES: "event times", HEADERS: "headers", ONE_APPEND_TIME: "one append time",
               EVENT_TIME_OFFSETS: "event time offsets", SHARED_HEADER_KEYS: "shared header keys",
               SHARED_HEADERS: "shared headers"}
_NEEDS = {EVENT_TIME_OFFSETS: EVENT_TIMES, SHARED_HEADER_KEYS: HEADERS, SHARED_HEADERS: SHARED_HEADER_KEYS}
_KNOWN_FLAGS = sum(LAYOUT_BITS)
OFFSET_MAX = 2**31 - 1  # an event time offset from the batch's base, either way
NO_OFFSET = -(2**31)  # an event time offset that stands for NO_TIME
_HEAD = struct.Struct(">IB3x")
HEAD_BYTES = _HEAD.size  # 8
_I64, _U16 = struct.Struct(">q"), struct.Struct(">H")
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


def headers_bytes(headers: Sequence[Header]) -> int:
    """Check one message's headers (as check_headers) and return what they add to a batch of the
    plain layout (its count (2), and per header two lengths (6), its key and value bytes)."""
    check_headers(headers)
    return 2 + sum(6 + (len(k) if k.isascii() else len(k.encode())) + len(v) for k, v in headers)


def _header_columns(headers: Sequence[Sequence[Header]]) -> tuple[list[bytes], list[bytes]]:
    """The header columns and bytes of a batch, in bulk (C-level passes: chain, zip, map, join);
    ASCII keys are encoded as one string."""
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
                 checked: bool = False) -> bytes:
    """One batch of len(payloads) messages in the plain layout (bits 0-2). keys/event_ms/headers
    are None when no message has one (the common case costs no column); else one value per
    message (None, NO_TIME, ()). checked: the caller checked every key and header against the
    bounds already."""
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
        columns, header_data = _header_columns(headers)
        parts += columns
        data += header_data
    return b"".join(parts + data + list(payloads))


def event_column(event_ms: Sequence[int]) -> tuple[int, bytes]:
    """The event-times column (and EVENT_TIME_OFFSETS when it is the short form): offsets from
    the first message's time that has one, when every time lies within OFFSET_MAX of it and
    there is more than one message (for one, the base and an offset are longer than its time)."""
    n = len(event_ms)
    base = event_ms[0]
    if n > 1 and base == event_ms[-1] != NO_TIME and event_ms.count(base) == n:  # one time for all: offsets 0
        return EVENT_TIME_OFFSETS, _I64.pack(base) + bytes(4 * n)
    # The caller's ints (OpenBatch.add checked each): fromiter is the fastest way from a list of ints.
    times = np.fromiter(event_ms, dtype=np.int64, count=n)
    lo, hi = int(times.min()), int(times.max())
    if lo != NO_TIME:  # every message has one: the common case, four numpy passes
        base = event_ms[0]
        if n > 1 and lo - base >= -OFFSET_MAX and hi - base <= OFFSET_MAX:
            return EVENT_TIME_OFFSETS, _I64.pack(base) + (times - base).astype(">i4").tobytes()
        return 0, times.astype(">i8").tobytes()
    present = times != NO_TIME
    given = times[present]
    ensure(len(given) > 0, "an event-times column without an event time")
    base = int(given[0])
    if n > 1 and int(given.min()) - base >= -OFFSET_MAX and hi - base <= OFFSET_MAX:
        offsets = np.where(present, times - np.where(present, base, times), NO_OFFSET)
        return EVENT_TIME_OFFSETS, _I64.pack(base) + offsets.astype(">i4").tobytes()
    return 0, times.astype(">i8").tobytes()


def encode_columns(payloads: Sequence[bytes], append_ms: int, *, keys: Sequence[bytes | None] | None = None,
                   event_ms: Sequence[int] | None = None, header_keys: tuple[str, ...] | None = None,
                   header_values: Sequence[bytes] | None = None,
                   headers: Sequence[Sequence[Header]] | None = None,
                   header_value_length: int | None = None) -> bytes:
    """A LogWriter's batch (OpenBatch keeps its fields in these columns), in the short layout:
    one append time (bit 3), event times as offsets where they fit (bit 4), and headers either
    per message (`headers`, the plain columns) or, when every message has the same header keys,
    those keys once and the values c per message, flat (`header_keys`, `header_values`: bit 5;
    bit 6 as well when every message's values are the first one's; `header_value_length`: every
    value has that many bytes, written without measuring each). The caller checked every key and
    header against the bounds (OpenBatch.add does, so that the message's own append fails)."""
    n = len(payloads)
    if not 1 <= n <= MESSAGES_PER_ENTRY_MAX:
        raise MessageBoundError(f"a batch holds 1..MESSAGES_PER_ENTRY_MAX ({MESSAGES_PER_ENTRY_MAX}) messages, not {n}")
    flags = ONE_APPEND_TIME
    parts = [b"", _packed("I", map(len, payloads)), _I64.pack(append_ms)]
    if event_ms is not None:
        ensure(len(event_ms) == n, f"{len(event_ms)} event times for {n} messages")
        short, column = event_column(event_ms)
        flags |= EVENT_TIMES | short
        parts.append(column)
    data: list[bytes] = []
    if keys is not None:
        ensure(len(keys) == n, f"{len(keys)} keys for {n} messages")
        flags |= KEYS
        parts.append(_packed("i", (-1 if k is None else len(k) for k in keys)))
        data.append(b"".join(k for k in keys if k is not None))
    if header_keys is not None and header_values is not None:
        c = len(header_keys)
        ensure(0 < c <= HEADERS_PER_MESSAGE_MAX and len(header_values) == c * n and headers is None,
               f"shared header keys: {c} keys, {len(header_values)} values for {n} messages")
        flags |= HEADERS | SHARED_HEADER_KEYS
        values = header_values
        if values[-c] == values[0] and ((values.count(values[0]) == n) if c == 1 else list(values[:c]) * n == list(values)):
            flags |= SHARED_HEADERS  # the same headers on every message: once
            values = values[:c]
        names = [k.encode() for k in header_keys]
        joined = b"".join(values)
        if header_value_length is None:
            lengths = _packed("I", map(len, values))
        else:  # one length for all (OpenBatch.add kept it so); their total must agree
            ensure(len(joined) == header_value_length * len(values),
                   f"{len(values)} header values of {len(joined)} bytes are not all {header_value_length} bytes")
            lengths = _packed("I", (header_value_length,)) * len(values)
        parts += [_U16.pack(c), _packed("H", map(len, names)), lengths]
        data += [b"".join(names), joined]
    elif headers is not None:
        ensure(len(headers) == n, f"{len(headers)} headers for {n} messages")
        flags |= HEADERS
        columns, header_data = _header_columns(headers)
        parts += columns
        data += header_data
    parts[0] = _HEAD.pack(n, flags)
    return b"".join(chain(parts, data, payloads))


@dataclass(frozen=True, slots=True)
class MessageBatch:
    """A decoded batch: columns as numpy arrays, bytes as one buffer; messages made on demand."""

    count: int
    payload_starts: np.ndarray  # int64, count + 1 offsets into `data`
    append_ms: np.ndarray  # int64
    event_ms: np.ndarray | None  # int64, NO_TIME = none; None: no message has one
    key_starts: np.ndarray | None  # int64, count + 1 offsets; a key of length -1 is absent
    key_lengths: np.ndarray | None  # int32
    header_counts: np.ndarray | None  # int64 cumulative, count + 1: message i has headers counts[i]..counts[i+1]-1
    header_key_starts: np.ndarray | None  # offsets (int64) of the header keys stored, end to end
    header_value_starts: np.ndarray | None  # offsets of the header values stored
    data: memoryview
    # Header j's key is stored key header_key_index[j] (None: key j): with shared header keys
    # (layout bit 5) each key is stored once for all messages; likewise the values (bit 6).
    header_key_index: np.ndarray | None = None
    header_value_index: np.ndarray | None = None

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
        ki, vi = self.header_key_index, self.header_value_index
        out = []
        for j in range(int(self.header_counts[i]), int(self.header_counts[i + 1])):
            k = j if ki is None else int(ki[j])
            v = j if vi is None else int(vi[j])
            out.append((bytes(d[int(ks[k]):int(ks[k + 1])]).decode(), bytes(d[int(vs[v]):int(vs[v + 1])])))
        return out


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
        # Native int64 first: a cumsum straight from the big-endian column casts inside the
        # accumulation, 8x slower (48 us per 1,000 lengths, 10% of a batched raw read's CPU).
        np.cumsum(lengths.astype(np.int64), out=starts[1:])
        starts[1:] += self.at
        self.at = int(starts[-1])
        if self.at > len(self.data):
            raise EntryFormatError(f"{self.where}: message batch shorter than its lengths say")
        return starts


def _layout(flags: int, where: str) -> None:
    """Refuse a layout this release cannot read, naming the bits: unknown ones (a later
    release's), or a bit without the one it refines."""
    unknown = flags & ~_KNOWN_FLAGS
    if unknown:
        raise EntryFormatError(f"{where}: message batch layout 0x{flags:02x} has bits 0x{unknown:02x} unknown to this "
                               f"release (it knows {', '.join(f'0x{b:02x} {name}' for b, name in LAYOUT_BITS.items())})")
    for bit, needed in _NEEDS.items():
        if flags & bit and not flags & needed:
            raise EntryFormatError(f"{where}: message batch layout 0x{flags:02x} has {LAYOUT_BITS[bit]!r} without "
                                   f"{LAYOUT_BITS[needed]!r}")


def _event_times(cur: _Cursor, n: int, flags: int) -> np.ndarray:
    if not flags & EVENT_TIME_OFFSETS:
        return cur.column(">i8", n).astype(np.int64)
    base = int(cur.column(">i8", 1)[0])
    offsets = cur.column(">i4", n).astype(np.int64)
    given = offsets != NO_OFFSET
    if given.any() and not NO_TIME < base + int(offsets[given].min()) <= base + int(offsets[given].max()) <= TIME_MS_MAX:
        raise EntryFormatError(f"{cur.where}: message batch event time offsets run outside the i64 range")
    return np.where(given, offsets + base, NO_TIME)


_HeaderColumns = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]


def _header_lengths(cur: _Cursor, n: int, flags: int) -> _HeaderColumns:
    """(cumulative counts, key lengths, value lengths, key index, value index) of the header
    columns, bounds checked: per message (the plain layout), or shared keys (bits 5 and 6)."""
    key_index = value_index = None
    if flags & SHARED_HEADER_KEYS:
        c = int(cur.column(">u2", 1)[0])
        hcounts = np.full(n, c, dtype=np.int64)
        hk_len = cur.column(">u2", c)
        hv_len = cur.column(">u4", c if flags & SHARED_HEADERS else c * n)
        key_index = np.tile(np.arange(c, dtype=np.int64), n)
        value_index = key_index if flags & SHARED_HEADERS else None
    else:
        hcounts = cur.column(">u2", n)
        h = int(hcounts.sum())
        hk_len, hv_len = cur.column(">u2", h), cur.column(">u4", h)
    if int(hcounts.max()) > HEADERS_PER_MESSAGE_MAX:
        raise EntryFormatError(f"{cur.where}: a message has more than {HEADERS_PER_MESSAGE_MAX} headers")
    if len(hk_len) and (int(hk_len.max()) > HEADER_KEY_BYTES_MAX or int(hv_len.max()) > HEADER_VALUE_BYTES_MAX):
        raise EntryFormatError(f"{cur.where}: a header exceeds its size bound")
    counts = np.concatenate(([0], np.cumsum(hcounts, dtype=np.int64)))
    return counts, hk_len, hv_len, key_index, value_index


def decode_batch(payload: bytes | memoryview, where: str = "entry") -> MessageBatch:
    """Check and unpack one batch (the entry's digest was checked already): every length must
    add up to exactly the bytes there are, and every bound holds."""
    data = memoryview(payload)
    if len(data) < HEAD_BYTES:
        raise EntryFormatError(f"{where}: {len(data)} bytes is shorter than a message batch head")
    n, flags = _HEAD.unpack_from(data)
    if not 1 <= n <= MESSAGES_PER_ENTRY_MAX:
        raise EntryFormatError(f"{where}: message batch count {n} outside 1..{MESSAGES_PER_ENTRY_MAX}")
    _layout(flags, where)
    if bytes(data[5:8]) != b"\0\0\0":
        raise EntryFormatError(f"{where}: message batch head has reserved bytes set (a layout unknown to this release)")
    cur = _Cursor(data, where)
    lengths = cur.column(">u4", n)
    if flags & ONE_APPEND_TIME:
        append_ms = np.full(n, int(cur.column(">i8", 1)[0]), dtype=np.int64)
    else:
        append_ms = cur.column(">i8", n).astype(np.int64)
    event_ms = _event_times(cur, n, flags) if flags & EVENT_TIMES else None
    key_lengths = cur.column(">i4", n).astype(np.int32) if flags & KEYS else None
    headers = _header_lengths(cur, n, flags) if flags & HEADERS else None
    key_starts = None
    if key_lengths is not None:
        if int(key_lengths.min()) < -1 or int(key_lengths.max()) > KEY_BYTES_MAX:
            raise EntryFormatError(f"{where}: a message key length is outside -1..{KEY_BYTES_MAX}")
        key_starts = cur.region(np.maximum(key_lengths, 0))
    header_counts = hk_starts = hv_starts = key_index = value_index = None
    if headers is not None:
        header_counts, hk_len, hv_len, key_index, value_index = headers
        hk_starts, hv_starts = cur.region(hk_len), cur.region(hv_len)
    payload_starts = cur.region(lengths)
    if cur.at != len(data):
        raise EntryFormatError(f"{where}: message batch has {len(data) - cur.at} bytes past its last message")
    return MessageBatch(n, payload_starts, append_ms, event_ms, key_starts, key_lengths, header_counts, hk_starts,
                        hv_starts, data, key_index, value_index)
