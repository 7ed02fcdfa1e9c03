"""A LogWriter's message batches: the open batch, the per-message handle, the linger timer.

Many messages travel as one entry (protocol.message_batch). What a message costs the producer is
kept to appending to two lists and making one small handle: the batch has ONE future, resolved
with the entry's place once the entry is acknowledged, and every message's handle reads its
position from it (a concurrent Future per message would cost more than the whole message).

A batch never spans ledgers: it is encoded, and the writer picks its ledger, only when it is sent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from metadata import LedgerId
from pyspark_ledger.log.position import Position
from pyspark_ledger.protocol.invariants import ensure
from pyspark_ledger.protocol.message_batch import (
    HEAD_BYTES,
    HEADER_VALUE_BYTES_MAX,
    MESSAGES_PER_ENTRY_MAX,
    NO_TIME,
    OFFSET_MAX,
    TIME_MS_MAX,
    Header,
    check_headers,
    check_key,
    checked_time_ms,
    encode_columns,
)

# Bounds of the writer's settings: a batch is one entry, and an entry is at most 4 MiB
# (ledger.write_handle.ENTRY_BYTES_MAX); a linger longer than a minute is a unit mistake.
BATCH_BYTES_MAX = 4 * 2**20 - 64 * 2**10  # room for the entry header and the batch columns' slack
BATCH_DELAY_MS_MAX = 60_000
MESSAGE_OVERHEAD_BYTES = 4  # a length per message (the append time is one per batch)
BATCH_HEAD_BYTES = HEAD_BYTES + 8  # the head and the one append time

_NO_KEY = object()  # OpenBatch._one_key when the batch has no one shared header key
Place = tuple[int, int, LedgerId]  # (seq, entry id, ledger id) of an acknowledged batch


@dataclass(frozen=True, slots=True)
class BatchSettings:
    max_messages: int = 1000
    max_bytes: int = 131_072
    max_delay_ms: float = 1.0

    def __post_init__(self) -> None:
        if not 1 <= self.max_messages <= MESSAGES_PER_ENTRY_MAX:
            raise ValueError(f"batch_max_messages must be 1..{MESSAGES_PER_ENTRY_MAX}, not {self.max_messages}")
        if not 1 <= self.max_bytes <= BATCH_BYTES_MAX:
            raise ValueError(f"batch_max_bytes must be 1..{BATCH_BYTES_MAX}, not {self.max_bytes}")
        if not 0 <= self.max_delay_ms <= BATCH_DELAY_MS_MAX:
            raise ValueError(f"batch_max_delay_ms must be 0..{BATCH_DELAY_MS_MAX}, not {self.max_delay_ms}")


class OpenBatch:
    """Messages gathered for one entry. Touched only under the writer's lock until it is sent;
    then only its future changes.

    Fields are kept as the columns of the batch (encode_columns): flat lists, no tuple per
    message. Headers: while every message has the same header keys (a producer's fixed names,
    the common case) the keys are kept once and the values flat, c per message; the first
    message that differs turns the batch to one tuple of pairs per message (_to_general_headers).
    size_bytes is never below the encoded size (encode checks): the byte bound counts it."""

    __slots__ = ("payloads", "keys", "event_ms", "header_keys", "header_values", "headers", "size_bytes", "opened",
                 "future", "_event_lo", "_event_hi", "_event_bytes", "_one_key", "_last_pair", "_last_value")

    def __init__(self, opened: float):
        self.payloads: list[bytes] = []
        # Optional columns, made the first time a message has the field (earlier messages: none).
        self.keys: list[bytes | None] | None = None
        self.event_ms: list[int] | None = None
        self.header_keys: tuple[str, ...] | None = None  # every message's header keys, or None
        self.header_values: list[bytes] | None = None  # with header_keys: c values per message, flat
        self.headers: list[tuple[Header, ...]] | None = None  # else: each message's pairs
        self.size_bytes = BATCH_HEAD_BYTES
        self.opened = opened  # time.monotonic() of its first message: the linger runs from it
        self.future: Future[Place] = Future()
        # Event times within these bounds cost 4 bytes each (an offset from the first one, layout
        # bit 4), and _event_bytes is 4, until one lies further away: then 8 for all, and an empty
        # range sends every time to _add_far_event. Empty until the first: it goes there too.
        self._event_lo, self._event_hi, self._event_bytes = 0, -1, 4
        # The one header key of a batch whose messages all have one header with it (else an object
        # no key is), and the last such pair seen and its value: the next message's is usually it.
        self._one_key: object = _NO_KEY
        self._last_pair: object = None
        self._last_value = b""

    def add(self, payload: bytes, key: bytes | None, event_ms: int | None, headers: Sequence[Header] | None) -> int:
        """Add one message; returns its index in the batch. A message over a bound is refused
        before anything of it is added (the batch is unchanged). Runs once per message on the
        producer's thread: the common cases (no stamps; an event time near the batch's first and
        one header with the batch's key) take no call and no check they do not need."""
        if key is not None:
            check_key(key)
        value: bytes | None = None  # the value of a message whose one header has the batch's one key
        pairs: tuple[Header, ...] | None = None  # else its headers, checked
        if headers:
            if len(headers) == 1:
                pair = headers[0]
                if pair is self._last_pair:  # the very (immutable) pair of the message before
                    value = self._last_value
                elif type(pair) is tuple and len(pair) == 2 and pair[0] is self._one_key and type(pair[1]) is bytes \
                        and len(pair[1]) <= HEADER_VALUE_BYTES_MAX:
                    value = pair[1]  # another value for the batch's one key
            if value is None:
                pairs = checked_headers(headers)  # raises naming the bound
        size = len(payload) + MESSAGE_OVERHEAD_BYTES
        i = len(self.payloads)
        if event_ms is not None:
            # An int within the range is valid (the range lies inside NO_TIME < t <= TIME_MS_MAX).
            if type(event_ms) is int and self._event_lo <= event_ms <= self._event_hi:
                self.event_ms.append(event_ms)  # type: ignore[union-attr]  # the range is empty without the column
                size += 4
            else:
                size += self._add_far_event(i, event_ms)  # checked first: raises naming the bound
        elif self.event_ms is not None:
            self.event_ms.append(NO_TIME)
            size += self._event_bytes
        self.payloads.append(payload)
        if key is not None or self.keys is not None:
            if self.keys is None:  # the column starts: a key length (-1) for each message before too
                self.keys = [None] * i
                size += 4 * i
            self.keys.append(key)
            size += 4 + (len(key) if key is not None else 0)
        if value is not None:
            self.header_values.append(value)  # type: ignore[union-attr]  # _one_key is set with header_values
            size += 4 + len(value)
        elif pairs is not None or self.header_keys is not None or self.headers is not None:
            size += self._add_headers(i, pairs or ())
            if self._one_key is not _NO_KEY and headers and type(headers[0]) is tuple and type(headers[0][1]) is bytes:
                # One header with the batch's one key, in an immutable pair: its identity says it all next time.
                self._last_pair, self._last_value = headers[0], headers[0][1]
        self.size_bytes += size
        return i

    def _add_far_event(self, i: int, event_ms: int) -> int:
        """Message i's event time when it is the batch's first, too far from the first for an
        offset, after such a one, or not an int: checked, added; returns the bytes it adds."""
        t = checked_time_ms(event_ms)  # an int-like, or out of range: converted, or refused by name
        events = self.event_ms
        if events is None:  # the first: the base, and an offset (NO_OFFSET) for each message before
            self.event_ms = [NO_TIME] * i + [t]
            self._event_lo, self._event_hi = max(t - OFFSET_MAX, NO_TIME + 1), min(t + OFFSET_MAX, TIME_MS_MAX)
            return 8 + 4 * (i + 1)
        events.append(t)
        if self._event_bytes == 8:  # full times already
            return 8
        if self._event_lo <= t <= self._event_hi:
            return 4
        # Too far from the base: full times from now on, 8 bytes each instead of the base and
        # offsets; every later time comes here (an empty range) and costs 8.
        self._event_lo, self._event_hi, self._event_bytes = 0, -1, 8
        return 8 * len(events) - (8 + 4 * (len(events) - 1))

    def _add_headers(self, i: int, pairs: tuple[Header, ...]) -> int:
        """Message i's checked headers (maybe none) to the header columns; returns the bytes added."""
        keys = tuple(k for k, _ in pairs)
        if i == 0 and pairs:  # the first message's keys are the batch's, until a message differs
            self.header_keys, self.header_values = keys, [v for _, v in pairs]
            if len(keys) == 1:
                self._one_key = keys[0]
            return 2 + sum(2 + len(k.encode()) for k in keys) + sum(4 + len(v) for _, v in pairs)
        if self.header_keys is not None and keys == self.header_keys:
            self.header_values.extend(v for _, v in pairs)  # type: ignore[union-attr]  # set with header_keys
            return sum(4 + len(v) for _, v in pairs)
        added = self._to_general_headers(i)
        self.headers.append(pairs)  # type: ignore[union-attr]  # _to_general_headers made it
        return added + _plain_headers_bytes(pairs)

    def _to_general_headers(self, n: int) -> int:
        """Turn the shared-keys columns of messages 0..n-1 into one tuple of pairs per message;
        returns what that adds to the batch's size."""
        if self.headers is not None:
            return 0
        hk, values = self.header_keys, self.header_values
        if hk is None or values is None:
            self.headers = [()] * n
            return 2 * n
        c = len(hk)
        self.headers = [tuple(zip(hk, values[j * c:j * c + c])) for j in range(n)]
        self.header_keys = self.header_values = None
        self._one_key, self._last_pair = _NO_KEY, None
        shared = 2 + sum(2 + len(k.encode()) for k in hk) + 4 * len(values) + sum(map(len, values))
        return sum(map(_plain_headers_bytes, self.headers)) - shared

    def encode(self, append_ms: int) -> bytes:
        """The entry's payload. The append time is the batch's send time, the same for all its
        messages (as Kafka's LogAppendTime is per record batch): stored once."""
        data = encode_columns(self.payloads, append_ms, keys=self.keys, event_ms=self.event_ms,
                              header_keys=self.header_keys, header_values=self.header_values, headers=self.headers)
        ensure(len(data) <= self.size_bytes, f"a batch of {len(data)} bytes counted as {self.size_bytes}")
        return data


def checked_headers(headers: Sequence[Header]) -> tuple[Header, ...]:
    """A message's headers checked against the bounds, as immutable pairs of str and bytes (the
    caller's list, pairs or bytearrays may change after append)."""
    check_headers(headers)
    return tuple((k, v if type(v) is bytes else bytes(v)) for k, v in headers)


def _plain_headers_bytes(pairs: tuple[Header, ...]) -> int:
    """What one message's checked headers add in the plain layout (message_batch.headers_bytes)."""
    return 2 + sum(6 + len(k.encode()) + len(v) for k, v in pairs)


class MessageHandle:
    """One message of a batch: `result()` is its Position once its batch is acknowledged."""

    __slots__ = ("_future", "index")

    def __init__(self, future: Future[Place], index: int):
        self._future = future
        self.index = index

    def result(self, timeout: float | None = None) -> Position:
        seq, entry_id, ledger_id = self._future.result(timeout)
        return Position(seq, entry_id, ledger_id, self.index)

    def done(self) -> bool:
        return self._future.done()

    def in_batch(self, batch_future: Future[Place]) -> bool:
        return self._future is batch_future

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._future.exception(timeout)

    def add_done_callback(self, fn: Callable[[MessageHandle], object]) -> None:
        """fn(self) once the message is settled (on the thread that settles it, or at once)."""
        self._future.add_done_callback(lambda _f: fn(self))


class Linger:
    """Sends a writer's open batch once it is max_delay_ms old (Kafka's linger.ms): one thread per
    writer, waiting on a condition of the writer's lock, never polling."""

    def __init__(self, lock: threading.RLock, delay_ms: float, oldest: Callable[[], float | None],
                 send: Callable[[], None], name: str):
        self._cond = threading.Condition(lock)
        self._delay_s = delay_ms / 1000
        self._oldest = oldest  # the open batch's opening time, or None (called under the lock)
        self._send = send  # sends the open batch (called under the lock)
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=f"log-linger {name}", daemon=True)
        self._thread.start()

    def batch_opened(self) -> None:
        """Called under the writer's lock when a batch opens."""
        self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while not self._stopping:
                opened = self._oldest()
                if opened is None:
                    self._cond.wait(1.0)  # bounded: woken by batch_opened or stop
                    continue
                left = opened + self._delay_s - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                self._send()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=10.0)
