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
from operator import is_

from metadata import LedgerId
from pyspark_ledger.log.position import Position
from pyspark_ledger.protocol.message_batch import (
    HEAD_BYTES,
    MESSAGES_PER_ENTRY_MAX,
    NO_TIME,
    TIME_MS_MAX,
    Header,
    check_key,
    checked_time_ms,
    encode_batch,
    headers_bytes,
    plain_headers_bytes,
)

assert (NO_TIME, TIME_MS_MAX) == (-9223372036854775808, 9223372036854775807), "OpenBatch.add's literals"

# Bounds of the writer's settings: a batch is one entry, and an entry is at most 4 MiB
# (ledger.write_handle.ENTRY_BYTES_MAX); a linger longer than a minute is a unit mistake.
BATCH_BYTES_MAX = 4 * 2**20 - 64 * 2**10  # room for the entry header and the batch columns' slack
BATCH_DELAY_MS_MAX = 60_000
MESSAGE_OVERHEAD_BYTES = 12  # a length (4) and an append time (8) per message

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
    then only its future changes."""

    __slots__ = ("payloads", "keys", "event_ms", "headers", "size_bytes", "opened", "future", "_last_headers",
                 "_last_headers_bytes")

    def __init__(self, opened: float):
        self.payloads: list[bytes] = []
        # Optional columns, made the first time a message has the field (earlier messages: none).
        self.keys: list[bytes | None] | None = None
        self.event_ms: list[int] | None = None
        self.headers: list[Sequence[Header]] | None = None
        self.size_bytes = HEAD_BYTES
        self.opened = opened  # time.monotonic() of its first message: the linger runs from it
        self.future: Future[Place] = Future()
        # The last headers checked by the common path and their size: a producer's next message
        # usually has equal ones, found with one tuple comparison instead of a check.
        self._last_headers: tuple[Header, ...] = ()
        self._last_headers_bytes = 2

    def add(self, payload: bytes, key: bytes | None, event_ms: int | None, headers: Sequence[Header] | None) -> int:
        """Add one message; returns its index in the batch. A message over a bound is refused
        before anything of it is added (the batch is unchanged). Runs once per message on the
        producer's thread: the common cases take no call they do not need."""
        hs: tuple[Header, ...] = ()
        h_bytes = 2
        if headers:
            last = self._last_headers
            n = len(headers)
            if n == len(last) and (headers[0] is last[0] if n == 1 else all(map(is_, headers, last))):
                # The very pairs last checked (immutable tuples of str and bytes): reuse them, no copy
                # and no check; compared by identity, so a list changed since cannot pass.
                hs, h_bytes = last, self._last_headers_bytes
            else:
                hs = tuple(headers)  # the caller's list may change after append
                h_bytes = plain_headers_bytes(hs)
                if h_bytes >= 0:  # immutable pairs: kept for the next messages
                    self._last_headers, self._last_headers_bytes = hs, h_bytes
                else:
                    h_bytes = headers_bytes(hs)  # the full check: raises naming the bound, or accepts
                    hs = tuple((k, bytes(v)) for k, v in hs)  # copies: a list pair or bytearray may change later
        if key is not None:
            check_key(key)
        # The bounds as literals (NO_TIME < t <= TIME_MS_MAX; asserted at import): no global lookups.
        if event_ms is not None and (type(event_ms) is not int or
                                     not -9223372036854775808 < event_ms <= 9223372036854775807):
            event_ms = checked_time_ms(event_ms)  # an int-like, or out of range: converted, or refused by name
        payloads = self.payloads
        i = len(payloads)
        payloads.append(payload)
        size = len(payload) + MESSAGE_OVERHEAD_BYTES
        if key is not None or self.keys is not None:
            if self.keys is None:
                self.keys = [None] * i
            self.keys.append(key)
            size += 4 + (len(key) if key is not None else 0)
        events = self.event_ms
        if event_ms is not None or events is not None:
            if events is None:
                events = self.event_ms = [NO_TIME] * i
            events.append(NO_TIME if event_ms is None else event_ms)
            size += 8
        column = self.headers
        if hs or column is not None:
            if column is None:
                column = self.headers = [()] * i
            column.append(hs)
            size += h_bytes
        self.size_bytes += size
        return i

    def encode(self, append_ms: int) -> bytes:
        """The entry's payload. The append time is the batch's send time, the same for all its
        messages (as Kafka's LogAppendTime is per record batch)."""
        n = len(self.payloads)
        hs = self.headers
        # A producer's constant headers: every message's equal to the first's (the last one's
        # first, which tells most batches that differ at once; C-level comparisons).
        uniform = hs is not None and hs[-1] == hs[0] and hs.count(hs[0]) == n
        return encode_batch(self.payloads, [append_ms] * n, keys=self.keys, event_ms=self.event_ms,
                            headers=hs, checked=True, headers_uniform=uniform)  # add() checked every message


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
