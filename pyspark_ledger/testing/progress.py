"""Waiting on progress, not on the clock: how tests wait for slow real work (Spark queries, real
bookie processes) on a shared, loaded machine.

A wall-clock deadline fails a test that is slow but right (a run that needs 250 s when another
engineer's suite shares the cores). These helpers fail only when the work stops moving: the
measured value has not changed for `stall_s` (minutes by default), or the work has visibly
ended without reaching its goal. A total bound (`total_s`, an hour by default) keeps every wait
finite anyway.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from pyspark_ledger.errors import PySparkLedgerError

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

T = TypeVar("T")

STALL_S = 300.0  # no progress for this long: stuck, not slow
TOTAL_S = 3600.0
POLL_S = 0.5


class NoProgressError(PySparkLedgerError, AssertionError):
    """A wait saw no progress for its stall bound (or ran past its total bound)."""


def wait_on_progress(what: str, measure: Callable[[], T], done: Callable[[T], bool], *,
                     alive: Callable[[], bool] | None = None, stall_s: float = STALL_S,
                     total_s: float = TOTAL_S, poll_s: float = POLL_S) -> T:
    """Poll `measure()` until `done(value)`; the value that was done. Raises NoProgressError when
    the value has not changed for `stall_s`, when `alive()` turns False before done, or after
    `total_s` in all."""
    assert stall_s > 0 and total_s >= stall_s and poll_s > 0
    start = last_change = time.monotonic()
    value = measure()
    for _ in range(int(total_s / poll_s) + 2):
        if done(value):
            return value
        now = time.monotonic()
        if alive is not None and not alive():
            value = measure()  # the last word of work that just ended
            if done(value):
                return value
            raise NoProgressError(f"{what}: the work ended at {value!r} without finishing")
        if now - last_change > stall_s:
            raise NoProgressError(f"{what}: no progress for {stall_s:.0f} s (stuck at {value!r})")
        if now - start > total_s:
            break
        time.sleep(poll_s)
        new = measure()
        if new != value:
            value, last_change = new, time.monotonic()
    raise NoProgressError(f"{what}: not done after {total_s:.0f} s (at {value!r})")


def query_running(query: StreamingQuery) -> Callable[[], bool]:
    """An `alive` for wait_on_progress: False once the query stopped, and a query that stopped on
    an error raises that error (so a failed query fails the wait at once, saying why)."""
    def alive() -> bool:
        if query.isActive:
            return True
        failure = query.exception()
        if failure is not None:
            raise failure
        return False

    return alive


def _batches_seen(query: StreamingQuery) -> tuple[Any, ...]:
    progress = query.lastProgress
    if progress is None:
        return (None,)
    return progress.get("batchId"), progress.get("timestamp"), progress.get("numInputRows")


def await_query(query: StreamingQuery, *, stall_s: float = STALL_S, total_s: float = TOTAL_S,
                poll_s: int = 1) -> None:
    """query.awaitTermination() bounded by progress: returns when the query ends (raising what it
    failed with, as awaitTermination does), raises NoProgressError when it made no progress for
    `stall_s` (no new progress report), or runs past `total_s`."""
    assert stall_s > 0 and total_s >= stall_s and poll_s > 0
    start = last_change = time.monotonic()
    seen = _batches_seen(query)
    for _ in range(int(total_s / poll_s) + 2):
        if query.awaitTermination(poll_s):
            return
        now = time.monotonic()
        new = _batches_seen(query)
        if new != seen:
            seen, last_change = new, now
        elif now - last_change > stall_s:
            raise NoProgressError(f"streaming query {query.name or query.id}: no progress for {stall_s:.0f} s")
        if now - start > total_s:
            break
    raise NoProgressError(f"streaming query {query.name or query.id}: not finished after {total_s:.0f} s")
