"""Decommissioning a bookie: mark every ledger with a fragment on it under-replicated (reason
"decommission"), wait for the replication workers to move them (a progress bar on a terminal),
check that no ledger names the bookie any more, and only then say it may leave.

The bookie keeps serving meanwhile, so every copy is read from it or its peers. New ledgers may
still be placed on it while it is writable: the final check finds them and marks them too, at
most ROUNDS_MAX times. Every wait is bounded by timeout_s.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from metadata import CorruptMetadataError, LedgerId
from metadata.underreplication import REASON_DECOMMISSION, UnderReplicationManager
from pyspark_ledger.autorecovery.auditor import RateLimiter
from pyspark_ledger.autorecovery.service import holder_name

if TYPE_CHECKING:
    from pyspark_ledger.client import LedgerClient

ROUNDS_MAX = 5
POLL_S = 1.0


def ledgers_on(client: LedgerClient, bookie: str, limiter: RateLimiter) -> list[LedgerId]:
    out = []
    for lid in client.list_ledgers():
        limiter.acquire()
        try:
            got = client.ledgers.get(lid)
        except CorruptMetadataError:
            continue
        if got is not None and bookie in got[0].bookies():
            out.append(lid)
    return out


def decommission(client: LedgerClient, bookie: str, *, timeout_s: float, scan_rate_per_s: float,
                 progress: bool) -> dict[str, Any]:
    start = time.monotonic()
    deadline = start + timeout_s
    marks = UnderReplicationManager(client.store)
    limiter = RateLimiter(scan_rate_per_s)
    holder = f"decommission {bookie} by {holder_name()}"
    marked: set[LedgerId] = set()
    left: set[LedgerId] = set()
    bar = tqdm(total=0, desc=f"moving ledgers off {bookie}", unit="ledger", file=sys.stderr, disable=not progress)
    try:
        for _ in range(ROUNDS_MAX):
            found = ledgers_on(client, bookie, limiter)
            if not found:
                break
            for lid in found:
                marks.mark(lid, {bookie}, REASON_DECOMMISSION, holder)
            marked |= set(found)
            bar.total = len(marked)
            bar.refresh()
            left = _wait_cleared(marks, set(found), deadline, bar)
            if left:
                break  # timed out
        else:
            left = set(ledgers_on(client, bookie, limiter))
    finally:
        bar.close()
    return {"bookie": bookie, "marked": len(marked), "left": len(left), "done": not left,
            "seconds": round(time.monotonic() - start, 3)}


def _wait_cleared(marks: UnderReplicationManager, waiting: set[LedgerId], deadline: float, bar: tqdm) -> set[LedgerId]:
    """Wait until none of `waiting` is marked any more (one listing per poll). Returns those left."""
    while waiting:
        still = waiting & set(marks.ledger_ids())
        bar.update(len(waiting) - len(still))
        waiting = still
        if not waiting or time.monotonic() >= deadline:
            break
        time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
    return waiting
