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
# OpenBatch._shape: what a message must be to be added without a call. Plain: no key, time or
# header, in a batch without those columns; events: an event time in the offsets' range, in a
# batch with only that column; header: one header with the batch's one key (a batch with only
# the shared-keys columns); header and events: both. Other: every message takes _add_general.
# Same: one header and maybe an event time, the very objects of the batch's first message (as a
# producer's constant header and time are), as every message's so far.
_PLAIN, _EVENTS, _HEADER, _HEADER_EVENTS, _SAME, _OTHER = 0, 1, 2, 3, 4, -1
_HEADER_BYTES = MESSAGE_OVERHEAD_BYTES + 4  # a message's length and its one header value's length
_STAMPED_BYTES = _HEADER_BYTES + 4  # and an event time offset
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
                 "future", "_event_lo", "_event_hi", "_event_bytes", "_one_key", "_shape",
                 "_value_len", "_value_max", "_first_value", "_first_event",
                 "_same_event", "_same_bytes")

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
        # no key is), and the shape of the messages add() takes without a call (_shape_now).
        self._one_key: object = _NO_KEY
        self._shape = _PLAIN
        # With _one_key: the length of every header value so far (-1 once they differ), and the
        # bound the next one's is checked against in add() when not that (-1: none passes there).
        self._value_len, self._value_max = -1, -1
        # Identity fast paths (a producer's constant header or time is the same object every time):
        # the batch's first header value when its one header is bytes, and its first event time
        # (_SAME) while offsets fit (else an object no time is).
        self._first_value: object = _NO_KEY
        self._first_event: object = _NO_KEY
        # _SAME: the first message's event time (None: the batch has none), and what a message costs.
        self._same_event: object = None
        self._same_bytes = 0

    def add(self, payload: bytes, key: bytes | None, event_ms: int | None, headers: Sequence[Header] | None) -> int:
        """Add one message; returns its index in the batch. A message over a bound is refused
        before anything of it is added (the batch is unchanged). Runs once per message on the
        producer's thread: a message of the batch's shape (_shape: plain; an event time near the
        batch's first; one header with the batch's one key; both) is added here, with no call and
        only the checks that bound it; any other goes to _add_general, which checks everything."""
        i = len(self.payloads)
        if key is None:
            shape = self._shape
            try:
                if headers is not None:
                    if shape >= _HEADER:
                        (k, v), = headers  # copied out now: a list or pair the producer changes later changes nothing
                        if shape == _SAME:
                            # The very value and time (or none) of the batch's first message, as every
                            # message's so far: their columns hold the first's alone (_materialize).
                            if v is self._first_value and event_ms is self._same_event and k is self._one_key:
                                self.payloads.append(payload)
                                self.size_bytes += len(payload) + self._same_bytes
                                return i
                        else:
                            # The batch's first value (checked; bytes: immutable) or a bytes value as long
                            # as the batch's values so far, or (once they differ, _value_max) within the bound.
                            size = len(v)
                            if (v is self._first_value or type(v) is bytes and (size == self._value_len
                                                                                or size <= self._value_max)) \
                                    and (k is self._one_key or type(k) is str and k == self._one_key):
                                if shape == _HEADER_EVENTS:
                                    if type(event_ms) is int and self._event_lo <= event_ms <= self._event_hi:
                                        self.event_ms.append(event_ms)  # type: ignore[union-attr]  # the shape says so
                                        self.header_values.append(v)  # type: ignore[union-attr]  # the shape says so
                                        self.payloads.append(payload)
                                        self.size_bytes += len(payload) + size + _STAMPED_BYTES
                                        return i
                                elif event_ms is None:
                                    self.header_values.append(v)  # type: ignore[union-attr]  # the shape says so
                                    self.payloads.append(payload)
                                    self.size_bytes += len(payload) + size + _HEADER_BYTES
                                    return i
                elif event_ms is None:
                    if shape == _PLAIN:
                        self.payloads.append(payload)
                        self.size_bytes += len(payload) + MESSAGE_OVERHEAD_BYTES
                        return i
                # An int within the range is valid (the range lies inside NO_TIME < t <= TIME_MS_MAX).
                elif shape == _EVENTS and type(event_ms) is int and self._event_lo <= event_ms <= self._event_hi:
                    self.event_ms.append(event_ms)  # type: ignore[union-attr]  # the shape says the column is there
                    self.payloads.append(payload)
                    self.size_bytes += len(payload) + MESSAGE_OVERHEAD_BYTES + 4
                    return i
            except (TypeError, ValueError):
                pass  # not one pair (or a time no int compares with): _add_general names what is wrong
        self.size_bytes += self._add_general(i, payload, key, event_ms, headers)
        self._shape = self._shape_now()
        return i

    def _add_general(self, i: int, payload: bytes, key: bytes | None, event_ms: int | None,
                     headers: Sequence[Header] | None) -> int:
        """Message i of any shape: every field checked first (raises naming the bound, nothing
        added), then added; returns the bytes it adds."""
        self._materialize()
        check_key(key)
        pairs = checked_headers(headers) if headers else None
        size = len(payload) + MESSAGE_OVERHEAD_BYTES
        if event_ms is not None:
            size += self._add_far_event(i, event_ms)  # checked before it adds: raises naming the bound
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
        if pairs is not None or self.header_keys is not None or self.headers is not None:
            size += self._add_headers(i, pairs or ())
        return size

    def _shape_now(self) -> int:
        """The shape of messages add() takes without a call, given the batch's columns now."""
        if self.keys is not None or self.headers is not None:
            return _OTHER
        if self.header_keys is None:
            return _PLAIN if self.event_ms is None else _EVENTS
        if self._one_key is _NO_KEY:
            return _OTHER
        if len(self.payloads) == 1 and self._first_value is not _NO_KEY and \
                (self.event_ms is None or self._first_event is not _NO_KEY):
            self._same_event = None if self.event_ms is None else self._first_event
            self._same_bytes = (_HEADER_BYTES if self.event_ms is None else _STAMPED_BYTES) + self._value_len
            return _SAME
        return _HEADER if self.event_ms is None else _HEADER_EVENTS

    def _materialize(self) -> None:
        """Leave the _SAME shape: its columns hold the first message's entries alone, which every
        message shares; repeat them, one per message (before anything else reads or adds to them)."""
        n = len(self.payloads)
        if self._shape == _SAME:
            values = self.header_values
            ensure(values is not None and len(values) == 1, "a batch of one shared header value has its value once")
            assert values is not None  # ensured; for the type checker
            values *= n  # in place, as is the next
            if self.event_ms is not None:
                self.event_ms *= n
            # What it is now, even if the message that made it leave is then refused.
            self._shape = _HEADER if self.event_ms is None else _HEADER_EVENTS

    def _add_far_event(self, i: int, event_ms: int) -> int:
        """Message i's event time (any: the batch's first, one too far from the first for an
        offset, one after such a one, one not an int): checked, added; returns the bytes it adds."""
        t = checked_time_ms(event_ms)  # an int-like, or out of range: converted, or refused by name
        events = self.event_ms
        if events is None:  # the first: the base, and an offset (NO_OFFSET) for each message before
            self.event_ms = [NO_TIME] * i + [t]
            self._first_event = event_ms if type(event_ms) is int else _NO_KEY  # t itself when given an int
            self._event_lo, self._event_hi = max(t - OFFSET_MAX, NO_TIME + 1), min(t + OFFSET_MAX, TIME_MS_MAX)
            return 8 + 4 * (i + 1)
        events.append(t)
        if self._event_bytes == 8:  # full times already
            return 8
        if self._event_lo <= t <= self._event_hi:
            return 4
        # Too far from the base: full times from now on, 8 bytes each instead of the base and
        # offsets; every later time comes here (an empty range) and costs 8.
        self._event_lo, self._event_hi, self._event_bytes, self._first_event = 0, -1, 8, _NO_KEY
        return 8 * len(events) - (8 + 4 * (len(events) - 1))

    def _add_headers(self, i: int, pairs: tuple[Header, ...]) -> int:
        """Message i's checked headers (maybe none) to the header columns; returns the bytes added."""
        keys = tuple(k for k, _ in pairs)
        if i == 0 and pairs:  # the first message's keys are the batch's, until a message differs
            self.header_keys, self.header_values = keys, [v for _, v in pairs]
            if len(keys) == 1:
                self._one_key, self._value_len, self._first_value = keys[0], len(pairs[0][1]), pairs[0][1]
            return 2 + sum(2 + len(k.encode()) for k in keys) + sum(4 + len(v) for _, v in pairs)
        if self.header_keys is not None and keys == self.header_keys:
            self.header_values.extend(v for _, v in pairs)  # type: ignore[union-attr]  # set with header_keys
            if len(keys) == 1 and len(pairs[0][1]) != self._value_len:  # lengths differ: one per value
                self._value_len, self._value_max = -1, HEADER_VALUE_BYTES_MAX
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
        self._one_key, self._value_len, self._value_max, self._first_value = _NO_KEY, -1, -1, _NO_KEY
        shared = 2 + sum(2 + len(k.encode()) for k in hk) + 4 * len(values) + sum(map(len, values))
        return sum(map(_plain_headers_bytes, self.headers)) - shared

    def encode(self, append_ms: int) -> bytes:
        """The entry's payload. The append time is the batch's send time, the same for all its
        messages (as Kafka's LogAppendTime is per record batch): stored once."""
        self._materialize()
        data = encode_columns(self.payloads, append_ms, keys=self.keys, event_ms=self.event_ms,
                              header_keys=self.header_keys, header_values=self.header_values, headers=self.headers,
                              header_value_length=self._value_len if self._value_len >= 0 else None)
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
