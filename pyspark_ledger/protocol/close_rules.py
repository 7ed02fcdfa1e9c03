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
