"""The search by time (log/time_search.py), pure: over seeded logs of ledgers whose messages have
non-decreasing times per ledger, the position found is exactly the first message with a time at
or after T (brute force over every message), for every T around every message time; and a
planted off-by-one in the bisection is caught by the same check."""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
import pytest

from metadata import LedgerId
from metadata.log_record import LogLedger
from pyspark_ledger.log.time_search import first_entry_at_or_after, first_index_at_or_after, may_hold_at_or_after

SEEDS = 300

Log = list[tuple[LogLedger, list[np.ndarray]]]  # each ledger with its entries' message times


def seeded_log(rng: random.Random) -> Log:
    """Ledgers as a LogWriter leaves them: times never step back within a ledger, each ledger
    joins at or after the previous one's last batch, sealed ones carry their seal time (or not:
    a release before seal times), the last may be open; some hold unbatched entries."""
    now = rng.randrange(1_000, 2_000)
    out: Log = []
    n_ledgers = rng.randrange(1, 6)
    for seq in range(n_ledgers):
        ctime = now
        entries = []
        unbatched = rng.random() < 0.25  # format 2: every entry carries its ledger's join time
        for _ in range(rng.randrange(0, 8)):
            now += rng.choice((0, 0, 1, 3, 10))
            k = 1 if unbatched else rng.randrange(1, 5)
            entries.append(np.array([ctime if unbatched else now] * k, dtype=np.int64))  # one time per batch
        now += rng.choice((0, 1, 5))
        last = seq == n_ledgers - 1
        sealed = not last or rng.random() < 0.5
        sealed_ms = now if sealed and rng.random() < 0.7 else None
        out.append((LogLedger(seq, LedgerId(0, seq + 1), ctime, len(entries) if sealed else None,
                              0 if sealed else None, sealed_ms=sealed_ms), entries))
    return out


def search(log: Log, t: int, bisect: Callable[..., int | None] = first_entry_at_or_after,
           ) -> tuple[int, int, int] | None:
    """log/reader.py's position_at_time over an in-memory log."""
    for i, (lg, entries) in enumerate(log):
        nxt = log[i + 1][0] if i + 1 < len(log) else None
        if not may_hold_at_or_after(lg, nxt, t):
            continue
        e = bisect(0, len(entries) - 1, t, lambda k, entries=entries: int(entries[k].max()))
        if e is not None:
            idx = first_index_at_or_after(entries[e], t)
            assert idx is not None
            return lg.seq, e, idx
    return None


def brute(log: Log, t: int) -> tuple[int, int, int] | None:
    for lg, entries in log:
        for e, times in enumerate(entries):
            for i, ms in enumerate(times.tolist()):
                if ms >= t:
                    return lg.seq, e, i
    return None


def times_to_try(log: Log) -> list[int]:
    ts = {int(m) for _, entries in log for times in entries for m in times.tolist()}
    ts |= {lg.ctime_ms for lg, _ in log}
    return sorted({t + d for t in ts for d in (-1, 0, 1)} | {0, 10**13})


def check(seed: int, bisect: Callable[..., int | None] = first_entry_at_or_after) -> None:
    log = seeded_log(random.Random(seed))
    for t in times_to_try(log):
        assert search(log, t, bisect) == brute(log, t), f"seed {seed}, T={t}"


@pytest.mark.parametrize("block", range(3))
def test_the_search_finds_exactly_the_first_message_at_or_after_t(block: int) -> None:
    for seed in range(block * SEEDS // 3, (block + 1) * SEEDS // 3):
        check(seed)


def test_a_planted_off_by_one_in_the_bisection_is_caught() -> None:
    def bisect_gt(first: int, last: int, t: int, latest: Callable[[int], int]) -> int | None:
        return first_entry_at_or_after(first, last, t + 1, latest)  # ">" where ">=" is meant

    failures = 0
    for seed in range(SEEDS):
        try:
            check(seed, bisect_gt)
        except AssertionError:
            failures += 1
    assert failures > SEEDS // 2, "the check did not catch a bisection that skips messages at exactly T"


def test_ledger_bounds() -> None:
    lid = LedgerId(0, 1)
    sealed = LogLedger(0, lid, 100, 5, 10, sealed_ms=200)
    assert may_hold_at_or_after(sealed, None, 200) and not may_hold_at_or_after(sealed, None, 201)
    old = LogLedger(0, lid, 100, 5, 10)  # sealed by a release before seal times
    later = LogLedger(1, LedgerId(0, 2), 300, None, None)
    assert may_hold_at_or_after(old, later, 300) and not may_hold_at_or_after(old, later, 301)
    assert may_hold_at_or_after(old, None, 10**13)  # the last ledger: only its entries tell
    assert may_hold_at_or_after(later, None, 10**13)  # open


def test_bisection_edges() -> None:
    times = [5, 5, 7, 7, 7, 9]
    assert first_entry_at_or_after(0, 5, 7, times.__getitem__) == 2
    assert first_entry_at_or_after(0, 5, 10, times.__getitem__) is None
    assert first_entry_at_or_after(0, 5, 0, times.__getitem__) == 0
    assert first_entry_at_or_after(0, -1, 0, times.__getitem__) is None
    assert first_index_at_or_after(np.array([1, 3, 3, 4]), 3) == 1
    assert first_index_at_or_after(np.array([1, 3]), 4) is None
