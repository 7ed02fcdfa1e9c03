"""pyspark_ledger/testing/progress.py: waits that fail on a stall, not on a wall clock."""

from __future__ import annotations

import itertools
import time

import pytest

from pyspark_ledger.testing.progress import NoProgressError, wait_on_progress


def test_a_wait_that_keeps_moving_outlasts_its_stall_bound() -> None:
    counter = itertools.count()
    started = time.monotonic()
    got = wait_on_progress("counting", lambda: next(counter), lambda n: n >= 40, stall_s=0.05, poll_s=0.005)
    assert got == 40 and time.monotonic() - started > 0.05  # longer than the stall bound, and still fine


def test_a_stalled_wait_fails_naming_where_it_stuck() -> None:
    with pytest.raises(NoProgressError, match=r"stuck: no progress for 0 s \(stuck at 7\)"):
        wait_on_progress("stuck", lambda: 7, lambda n: n > 7, stall_s=0.05, poll_s=0.01)


def test_work_that_ended_short_fails_at_once() -> None:
    with pytest.raises(NoProgressError, match="ended at 3 without finishing"):
        wait_on_progress("short", lambda: 3, lambda n: n > 3, alive=lambda: False, stall_s=60)
