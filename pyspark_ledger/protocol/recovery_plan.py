"""The recovery plan ("Closing a ledger as a reader", reference/bookkeeper-protocol.md).

1. Fence the last fragment until every write set has W-A+1 answers (distribution.covers_every_write_set).
2. Start reading at the highest LAC reported + 1, never before the last fragment's first entry.
3. Read forward in windows bounded in entries AND bytes. Each bookie answers at least the first
   entry asked and stops at its byte limit, so a window of MiB-sized entries comes back short:
   that is progress, not doubt. An entry is decided present when any copy is intact, absent when
   W-A+1 bookies of its write set say "no such entry"; "unknown", corrupt copies, errors and
   timeouts never count as absent (BookKeeper bugs 2908 and 2614).
4. The ledger ends before the first absent entry; every present entry is re-replicated to its
   write set in batches bounded in entries and bytes, then the ledger is closed there.

Only a round that decides nothing counts against the retry bound: a short answer moves the next
window forward, so a writer killed with any number of MiB entries in flight stays recoverable.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from pyspark_ledger.protocol.distribution import entry_absent
from pyspark_ledger.protocol.invariants import ensure

T = TypeVar("T")

READ_WINDOW_ENTRIES_MAX = 512
# Asked of each bookie per read; the bookie always returns the first entry even if it is larger.
READ_WINDOW_BYTES_MAX = 4 * 2**20
# Consecutive rounds that decide nothing before recovery gives up (and says which entry).
STALLED_ROUNDS_MAX = 5
REPLICATE_BATCH_ENTRIES_MAX = 512
REPLICATE_BATCH_BYTES_MAX = 4 * 2**20


class Answer(enum.IntEnum):
    """One bookie's answer for one entry. Order matters: a later round may upgrade an answer."""

    UNKNOWN = 0  # error, timeout, corrupt copy, "unknown entry state": never means absent
    ABSENT = 1  # NO_SUCH_ENTRY or NO_SUCH_LEDGER from a fenced bookie
    PRESENT = 2  # an intact copy


@dataclass(frozen=True, slots=True)
class ReadWindow:
    first: int
    last: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class WindowDecision(Generic[T]):
    found: list[T]  # intact copies of the present entries from window.first on, in order
    end: int | None  # the first absent entry: the ledger ends before it (None: not reached yet)
    next_entry: int  # where the next window starts
    undecided: int | None  # the entry no answer could decide yet (None if none)

    @property
    def progressed(self) -> bool:
        return bool(self.found) or self.end is not None


def recovery_start(lacs: Mapping[str, int], fragment_first_entry: int) -> int:
    """First entry to read: after the highest LAC the fenced bookies reported, and never before
    the last fragment's first entry (everything earlier was acknowledged when it was made)."""
    ensure(bool(lacs), "recovery starts only after fencing answers")
    return max(max(lacs.values()) + 1, fragment_first_entry)


def window_from(first: int, *, entries_max: int = READ_WINDOW_ENTRIES_MAX,
                bytes_max: int = READ_WINDOW_BYTES_MAX) -> ReadWindow:
    ensure(entries_max >= 1 and bytes_max >= 1, "read windows are bounded and non-empty")
    return ReadWindow(first, first + entries_max - 1, bytes_max)


def merge_answers(into: MutableMapping[int, dict[str, tuple[Answer, T | None]]], bookie_id: str,
                  answers: Mapping[int, tuple[Answer, T | None]]) -> None:
    """Keep each bookie's best answer per entry across rounds (present > absent > unknown)."""
    for eid, ans in answers.items():
        per = into.setdefault(eid, {})
        prev = per.get(bookie_id)
        if prev is None or ans[0] > prev[0]:
            per[bookie_id] = ans


def decide_window(window: ReadWindow, answers: Mapping[int, Mapping[str, tuple[Answer, T | None]]],
                  members_of: Callable[[int], Sequence[str]], *, write_quorum_size: int,
                  ack_quorum_size: int) -> WindowDecision[T]:
    """Walk the window in order: collect present entries until the first absent one, or stop at
    the first entry the answers cannot decide yet (the next window starts there)."""
    found: list[T] = []
    for e in range(window.first, window.last + 1):
        per = answers.get(e, {})
        members = members_of(e)
        copy = next((per[b][1] for b in members if b in per and per[b][0] is Answer.PRESENT), None)
        if copy is not None:
            found.append(copy)
            continue
        absent = [b for b in members if b in per and per[b][0] is Answer.ABSENT]
        if entry_absent(members, write_quorum_size, ack_quorum_size, absent):
            return WindowDecision(found, e, e, None)
        return WindowDecision(found, None, e, e)
    return WindowDecision(found, None, window.last + 1, None)
