"""Closing rules (reference/bookkeeper-protocol.md, "Closing a ledger as a writer" and recovery).

A writer closes by compare-and-set at its LAC. If the metadata changed under it:
- IN_RECOVERY: another client is recovering the ledger; the writer is fenced and must say so;
- CLOSED at the writer's LAC: somebody sealed it exactly where the writer would have: done;
- CLOSED elsewhere: the writer is fenced (its view and the ledger's end differ).
A close that failed stays failed: asking again must not turn it into a success.

Recovery closes at the entry before the first absent one; if another recovery closed the ledger
first, its end is adopted, so concurrent recoveries agree on where the ledger ends.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence


class CloseVerdict(enum.Enum):
    WRITE = "write"  # compare-and-set the close at the writer's LAC
    DONE = "done"  # already closed at exactly that entry
    FENCED = "fenced"  # another client recovered (or is recovering) the ledger


def writer_close_verdict(state: str, closed_at: int | None, writer_lac: int) -> CloseVerdict:
    """What a writer does on close, given the ledger's state as the metadata holds it now
    (`state` is a LedgerState value: "OPEN", "IN_RECOVERY" or "CLOSED")."""
    if state == "OPEN":
        return CloseVerdict.WRITE
    if state == "CLOSED" and closed_at == writer_lac:
        return CloseVerdict.DONE
    return CloseVerdict.FENCED


def recovery_close_point(found_last: int | None, start: int) -> int:
    """The last entry of a recovered ledger: the last present entry found reading forward from
    `start`, or start - 1 (everything up to the highest LAC) if none was found."""
    return found_last if found_last is not None else start - 1


class RecoveryCloseVerdict(enum.Enum):
    CLOSE = "close"  # compare-and-set the close on the version read
    ADOPT = "adopt"  # already closed (by another recovery or the writer): that end is the result
    REPLICATE_AGAIN = "replicate again"  # the fragments changed since this recovery's copies were made


def recovery_close_verdict(state: str, fragments_now: Sequence[tuple[int, Sequence[str]]],
                           fragments_replicated: Sequence[tuple[int, Sequence[str]]]) -> RecoveryCloseVerdict:
    """What a recovery does when it is about to close, given the metadata as it holds now.

    A concurrent recovery may have replaced a bookie of the last fragment after this one
    re-replicated its entries: closing then would seal a ledger whose metadata names, for the
    recovered entries, a bookie that never received them (fewer than A named copies; the
    simulator found it, seed 598). So the close is written only on the fragments the copies
    were made to; otherwise the recovery reads again from `first_changed_entry` (the other
    recovery's entries there may not have reached its newcomer yet either) and replicates to
    the fragments as they are now. Fragments are (first entry id, ensemble) pairs."""
    if state == "CLOSED":
        return RecoveryCloseVerdict.ADOPT
    now = [(first, tuple(ensemble)) for first, ensemble in fragments_now]
    replicated = [(first, tuple(ensemble)) for first, ensemble in fragments_replicated]
    if now != replicated:
        return RecoveryCloseVerdict.REPLICATE_AGAIN
    return RecoveryCloseVerdict.CLOSE


def first_changed_entry(fragments_now: Sequence[tuple[int, Sequence[str]]],
                        fragments_then: Sequence[tuple[int, Sequence[str]]]) -> int | None:
    """The first entry whose ensemble differs between two fragment lists (None: same lists).
    A recovery that finds the fragments changed re-reads and re-replicates from there."""
    now = [(first, tuple(ensemble)) for first, ensemble in fragments_now]
    then = [(first, tuple(ensemble)) for first, ensemble in fragments_then]
    for i, (a, b) in enumerate(zip(now, then)):
        if a != b:
            return min(a[0], b[0]) if i else 0
    if len(now) == len(then):
        return None
    longer = now if len(now) > len(then) else then
    return longer[min(len(now), len(then))][0]
