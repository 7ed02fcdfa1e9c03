"""Recovery's read-forward loop as a pure state machine (step 3 of recovery_plan).

The driver (ledger/recovery.py with bookie RPCs, the simulator with simulated ones) owns the
I/O; this machine owns every decision: which window to read next, how answers merge, when an
entry is decided, when a round that decides nothing counts as a stall, and when to give up.

    reader = RecoveryReader(start, members_of, bookies=..., write_quorum_size=W, ack_quorum_size=A)
    cmd = reader.first_command()                 # Read(window, bookies)
    while cmd is Read or RetryAfter:
        for each bookie: reader.on_answers(bookie, answers for cmd.window)   # missing = no answer
        cmd = reader.end_round()
    Done(last_entry, found) or Fail(entry, message)

A short answer (a bookie stops at its byte limit) decides the entries it carries, so it is
progress: the next window starts after them and the stall counter resets. Only rounds that
decide nothing count against STALLED_ROUNDS_MAX.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pyspark_ledger.protocol.invariants import ensure
from pyspark_ledger.protocol.recovery_plan import (
    READ_WINDOW_BYTES_MAX,
    READ_WINDOW_ENTRIES_MAX,
    STALLED_ROUNDS_MAX,
    Answer,
    ReadWindow,
    decide_window,
    merge_answers,
    window_from,
)

T = TypeVar("T")

__all__ = ["Done", "Fail", "Read", "ReaderCommand", "RecoveryReader", "RetryAfter"]


@dataclass(frozen=True, slots=True)
class Read:
    """Ask every bookie in `bookies` for `window` (with the fence flag) now."""

    window: ReadWindow
    bookies: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RetryAfter:
    """The last round decided nothing: wait (the driver's delay times `stalled`), then read `window`."""

    stalled: int
    window: ReadWindow
    bookies: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Done(Generic[T]):
    """Every entry from the start is decided: the ledger's last entry and the copies found, in order."""

    last_entry: int
    found: list[T]


@dataclass(frozen=True, slots=True)
class Fail:
    """Too many rounds decided nothing; `entry` is the one no answer could settle."""

    entry: int
    message: str


ReaderCommand = Read | RetryAfter | Done[Any] | Fail


class RecoveryReader(Generic[T]):
    """Reads forward from `start` until the first absent entry (see the module docstring)."""

    def __init__(self, start: int, members_of: Callable[[int], Sequence[str]], *, bookies: Sequence[str],
                 write_quorum_size: int, ack_quorum_size: int, entries_max: int = READ_WINDOW_ENTRIES_MAX,
                 bytes_max: int = READ_WINDOW_BYTES_MAX, stalled_max: int = STALLED_ROUNDS_MAX):
        ensure(start >= 0, "recovery reads from entry 0 on")
        ensure(stalled_max >= 1, "the stall bound is positive")
        self.start = start
        self.members_of = members_of
        self.bookies = tuple(bookies)
        self.write_quorum_size = write_quorum_size
        self.ack_quorum_size = ack_quorum_size
        self.entries_max, self.bytes_max, self.stalled_max = entries_max, bytes_max, stalled_max
        self.found: list[T] = []
        self.answers: dict[int, dict[str, tuple[Answer, T | None]]] = {}
        self.window = window_from(start, entries_max=entries_max, bytes_max=bytes_max)
        self.stalled = 0
        self.rounds = 0
        self.result: Done[T] | Fail | None = None

    def first_command(self) -> Read:
        return Read(self.window, self.bookies)

    def on_answers(self, bookie_id: str, answers: Mapping[int, tuple[Answer, T | None]]) -> None:
        """One bookie's answers for the current window (entries it did not reach are left out)."""
        ensure(self.result is None, "answers after the reader finished")
        window = self.window
        merge_answers(self.answers, bookie_id,
                      {e: a for e, a in answers.items() if window.first <= e <= window.last})

    def end_round(self) -> ReaderCommand:
        """Every bookie of the round answered or timed out: decide and say what to do next."""
        ensure(self.result is None, "a finished reader has no next round")
        self.rounds += 1
        window = self.window
        d = decide_window(window, self.answers, self.members_of, write_quorum_size=self.write_quorum_size,
                          ack_quorum_size=self.ack_quorum_size)
        ensure(d.next_entry >= window.first, "a window never moves the reader backwards")
        self.found.extend(d.found)
        if d.end is not None:
            self.result = Done(d.end - 1, self.found)
            return self.result
        for eid in [e for e in self.answers if e < d.next_entry]:
            del self.answers[eid]  # decided: keep only what the next window still needs
        self.window = window_from(d.next_entry, entries_max=self.entries_max, bytes_max=self.bytes_max)
        if d.progressed:
            self.stalled = 0
            return Read(self.window, self.bookies)
        self.stalled += 1
        if self.stalled >= self.stalled_max:
            entry = d.undecided if d.undecided is not None else d.next_entry
            self.result = Fail(entry, f"cannot decide whether entry {entry} exists: too few definite answers "
                                      "(bookies down or holding corrupt copies); refusing to guess")
            return self.result
        return RetryAfter(self.stalled, self.window, self.bookies)
