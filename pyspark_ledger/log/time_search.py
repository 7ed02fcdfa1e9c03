"""Where a time falls in a log: the first message whose time is at or after T (Kafka's
offsetsForTimes, and what startingTimestamp / endingTimestamp mean).

A message's time is its own append time (format 3, protocol.message_batch), or for an
unbatched entry (format 2, no time of its own) the time its ledger joined the log (ctime_ms), as
before messages had times. The search reads little:
- whole ledgers are passed by their bounds (`may_hold_at_or_after`): a ledger sealed at
  sealed_ms holds nothing later than that; an older sealed ledger without a seal time holds
  nothing later than the next ledger's join time (a LogWriter adds its next ledger before it
  seals the old one, and stamps every batch before it is added);
- inside the first ledger that may hold T, entries are bisected (`first_entry_at_or_after`):
  one writer's times never step back along its ledger (LogWriter keeps its append clock
  monotonic), so "the entry's latest time >= T" is false then true along the ledger;
- inside that entry, the first message at or after T (`first_index_at_or_after`), exactly.

Pure: the reads are callbacks (log/reader.py drives them). No I/O, no clocks.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from metadata.log_record import LogLedger

# A bisection of at most 2**63 entries ends in 63 steps; the bound catches a broken callback.
BISECT_STEPS_MAX = 64


def may_hold_at_or_after(lg: LogLedger, next_lg: LogLedger | None, t_ms: int) -> bool:
    """False only when every message of `lg` is known to be older than t_ms."""
    if lg.sealed_ms is not None:
        return lg.sealed_ms >= t_ms
    if lg.sealed and next_lg is not None:  # sealed by a release before seal times
        return max(lg.ctime_ms, next_lg.ctime_ms) >= t_ms
    return True  # open (or the last, sealed without a time): only its entries can tell


def first_entry_at_or_after(first: int, last: int, t_ms: int, latest_ms: Callable[[int], int]) -> int | None:
    """The first entry in first..last whose latest message time (`latest_ms(entry)`) is at or
    after t_ms, or None when not even `last`'s is. Bisects: latest_ms must not step back."""
    if last < first or latest_ms(last) < t_ms:
        return None
    lo, hi = first, last  # invariant: the answer is in lo..hi, and latest_ms(hi) >= t_ms
    for _ in range(BISECT_STEPS_MAX):
        if lo == hi:
            return lo
        mid = (lo + hi) // 2
        if latest_ms(mid) >= t_ms:
            hi = mid
        else:
            lo = mid + 1
    raise AssertionError(f"bisecting entries {first}..{last} took over {BISECT_STEPS_MAX} steps")


def first_index_at_or_after(times_ms: np.ndarray, t_ms: int) -> int | None:
    """The first message of one entry (times in message order) at or after t_ms, or None."""
    at = np.flatnonzero(times_ms >= t_ms)
    return int(at[0]) if len(at) else None
