"""What to do with one queued offload attempt (metadata.offload_queue): a pure rule.

    KEEP    the ledger's record names this attempt OFFLOADED (its files are the ledger's data), or
            the attempt may still be running (younger than the stale bound)
    DELETE  nothing will ever read these objects: the ledger is gone (trimmed, its log deleted),
            or its record names another attempt or none, and the attempt is stale
    ABANDON the record names this attempt WRITING and it is stale: clear the record by
            compare-and-set first (so the attempt, if it still runs, cannot record), then DELETE

An attempt announces itself within half the stale bound of queueing (offload_ledger refuses
later), so a stale attempt with no WRITING record can never announce afterwards.
"""

from __future__ import annotations

import enum

from metadata.offload_queue import QueuedAttempt
from metadata.offload_record import WRITING, OffloadRecord


class Verdict(enum.Enum):
    KEEP = "keep"
    DELETE = "delete"
    ABANDON = "abandon"


def verdict(q: QueuedAttempt, ledger_exists: bool, rec: OffloadRecord | None, now_ms: int, stale_ms: int) -> Verdict:
    if not ledger_exists:
        return Verdict.DELETE
    stale = now_ms - q.created_ms >= stale_ms
    if rec is not None and rec.attempt == q.attempt:
        if rec.offloaded:
            return Verdict.KEEP
        if rec.state == WRITING:
            return Verdict.ABANDON if stale else Verdict.KEEP
        return Verdict.KEEP  # a newer release's state: leave it to that release
    return Verdict.DELETE if stale else Verdict.KEEP
