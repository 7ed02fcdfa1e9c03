"""start_query (pyspark_ledger.testing.stream_start) without a JVM: a query that failed on Spark's
Python-worker start bound is started again, any other outcome is handed to the test as it is."""

from __future__ import annotations

from typing import Any, cast

import pytest

from pyspark_ledger.testing.stream_start import SPARK_WORKER_START_TIMEOUT, is_worker_start_failure, start_query

WORKER_START = ("[STREAM_FAILED] Query [id = 1] terminated with exception: Python worker failed to connect back.")


class FakeQuery:
    """Ended at once, with `failure` (or none)."""

    def __init__(self, failure: Exception | None) -> None:
        self.failure, self.isActive, self.name, self.id = failure, False, "fake", 1
        self.status: dict[str, Any] = {"message": "Stopped"}

    def exception(self) -> Exception | None:
        return self.failure


def starts(*failures: Exception | None) -> tuple[list[FakeQuery], Any]:
    made: list[FakeQuery] = []

    def start() -> Any:
        made.append(FakeQuery(failures[len(made)]))
        return made[-1]

    return made, start


def test_only_sparks_worker_start_bound_is_recognised() -> None:
    assert is_worker_start_failure(RuntimeError(WORKER_START))
    assert is_worker_start_failure(f"java.net.SocketTimeoutException: {SPARK_WORKER_START_TIMEOUT}")
    assert not is_worker_start_failure(RuntimeError("[PYTHON_DATA_SOURCE_ERROR] log 'x' was trimmed"))


def test_a_worker_start_failure_is_started_again_and_other_outcomes_are_kept() -> None:
    made, start = starts(RuntimeError(WORKER_START), None)
    assert start_query(start) is made[1] and len(made) == 2
    other = RuntimeError("another writer took over")
    made, start = starts(other, None)
    assert cast(FakeQuery, start_query(start)).exception() is other and len(made) == 1
    made, start = starts(*[RuntimeError(WORKER_START)] * 3)
    assert start_query(start, starts_max=2) is made[1] and len(made) == 2  # bounded: the last failure stays


def test_a_running_query_past_its_sources_is_returned_without_waiting() -> None:
    q = FakeQuery(None)
    q.isActive, q.status = True, {"message": "Waiting for data to arrive"}
    assert start_query(lambda: cast(Any, q)) is q
    with pytest.raises(AssertionError):
        start_query(lambda: cast(Any, q), starts_max=0)
