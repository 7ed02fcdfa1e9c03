"""One client per worker, in Spark (issue 33 item 4): one-second micro-batches of a log -> log
query open at most one metadata session per Python process (the driver's planner, the executors'
workers, the sink's commit runners), counted by every process itself (clients.AUDIT_ENV). The same
query with LEDGER_SPARK_CLIENT_CACHE=0 opens one per call, which the same check catches.

LEDGER_CLIENT_SESSION_BATCHES (default 8) sets the micro-batches of the cached run (the issue's
acceptance: 100). The driver waits on progress (pyspark_ledger/testing/micro_batch_driver.py).
"""

from __future__ import annotations

import os
from pathlib import Path

from pyspark_ledger.testing.micro_batch_driver import run_micro_batches

BATCHES = int(os.environ.get("LEDGER_CLIENT_SESSION_BATCHES", "8"))


def too_many(sessions: dict[int, int]) -> dict[int, int]:
    return {pid: n for pid, n in sessions.items() if n > 1}


def test_micro_batches_open_one_metadata_session_per_python_process(uri: str, tmp_path: Path) -> None:
    cached = run_micro_batches(uri, tmp_path, "cached", BATCHES, cache=True)
    assert len(cached.durations) == BATCHES
    print(f"{BATCHES} micro-batches: {sum(cached.sessions.values())} metadata sessions in {len(cached.sessions)} "
          "Python processes")
    assert cached.sessions and not too_many(cached.sessions), f"more than one session: {too_many(cached.sessions)}"
    # The checker catches a process that opens a session per call.
    uncached = run_micro_batches(uri, tmp_path, "uncached", 2, cache=False)
    assert too_many(uncached.sessions), uncached.sessions
