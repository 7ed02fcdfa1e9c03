"""The simulated world: clock, event queue, seeded randomness, trace and fault counters.

Events are (time, seq, callback) in a heap: `seq` breaks ties in scheduling order, so a seed's
history depends on nothing but `random.Random(seed)`. The trace keeps the last events for a
failure report and a running hash of every event for determinism checks.
"""

from __future__ import annotations

import heapq
import random
import zlib
from collections import Counter, deque
from collections.abc import Callable
from typing import Protocol

from pyspark_ledger.errors import PySparkLedgerError

TRACE_TAIL_EVENTS = 40
EVENTS_MAX = 200_000  # a history longer than this is a liveness bug (something loops)


class Violation(PySparkLedgerError):
    """An invariant of the ledger protocol does not hold in this history."""


class Pausable(Protocol):
    paused_until_s: float


class World:
    def __init__(self, seed: int, *, trace_all: bool = False):
        self.seed = seed
        self.rng = random.Random(seed)
        self.now_s = 0.0
        self._queue: list[tuple[float, int, Callable[[], None], str]] = []
        self._seq = 0
        self.events = 0
        self.trace_tail: deque[str] = deque(maxlen=TRACE_TAIL_EVENTS)
        self.trace_all: list[str] | None = [] if trace_all else None
        self.trace_hash = 0
        self.faults: Counter[str] = Counter()
        self.stats: Counter[str] = Counter()  # what the history exercised (not faults)
        self.autorecovery = False  # whether auditors and replication workers run (runner.py)
        self.racks = False  # whether bookies have racks and placement follows them (racks.py)
        self.runs = False  # whether writers append runs of entries (runs.py)

    # ---- scheduling ---------------------------------------------------------------------------

    def at(self, delay_s: float, fn: Callable[[], None], label: str) -> None:
        """Run `fn` after `delay_s` of simulated time."""
        self._seq += 1
        heapq.heappush(self._queue, (self.now_s + max(0.0, delay_s), self._seq, fn, label))

    def at_actor(self, actor: Pausable, delay_s: float, fn: Callable[[], None], label: str) -> None:
        """Like `at`, but a paused actor handles the event only once it resumes (a stopped
        process: its timers and sockets wait)."""

        def run() -> None:
            if actor.paused_until_s > self.now_s:
                self.at(actor.paused_until_s - self.now_s, run, label + " (after pause)")
                return
            fn()

        self.at(delay_s, run, label)

    def run_until(self, end_s: float) -> bool:
        """Run events up to `end_s`; True if the queue drained (every operation ended)."""
        queue = self._queue
        while queue:
            t, _, fn, label = queue[0]
            if t > end_s:
                return False
            heapq.heappop(queue)
            self.now_s = t
            self.events += 1
            if self.events > EVENTS_MAX:
                raise Violation(f"more than {EVENTS_MAX} events: some operation never ends")
            self.note(label)
            fn()
        return True

    def pending_labels(self, limit: int = 5) -> list[str]:
        return [label for _, _, _, label in sorted(self._queue)[:limit]]

    # ---- trace and counters -------------------------------------------------------------------

    def note(self, what: str) -> None:
        line = f"{self.now_s:9.4f} {what}"
        self.trace_tail.append(line)
        if self.trace_all is not None:
            self.trace_all.append(line)
        self.trace_hash = zlib.crc32(line.encode(), self.trace_hash)

    def fault(self, kind: str, what: str = "") -> None:
        self.faults[kind] += 1
        if what:
            self.note(f"FAULT {kind} {what}")
