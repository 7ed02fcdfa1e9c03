"""Starting a streaming query on a loaded machine: Spark's own start-up bound, retried.

Spark gives a Python worker it starts ~10 s to connect back to the JVM (PythonWorkerFactory's
createSimpleWorker: a constant 10000 ms in Spark 4.0-4.2, read from no setting;
`spark.python.authenticate.socketTimeout` and `spark.network.timeout` do not touch it). A
streaming query starts such a worker for its Python source (PythonScan.toMicroBatchStream ->
PythonStreamingSourceRunner.init) while it initialises its sources, after `start()` returned.
On a machine loaded far past its cores that start can miss the bound; the query then fails
before any of this package's code ran, with nothing read and no batch committed. `start_query`
starts such a query again (same checkpoint: it holds no batch yet), a bounded number of times.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from pyspark_ledger.testing.progress import wait_on_progress

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)

# What Spark says when its worker did not connect back in time (the SparkException and its cause).
SPARK_WORKER_START_FAILURE = "Python worker failed to connect back"
SPARK_WORKER_START_TIMEOUT = "Timed out while waiting for the Python worker to connect back"
QUERY_STARTS_MAX = 3
# StreamExecution's status while it has not yet created its sources (Spark 4.x).
_STARTING = ("Initializing StreamExecution", "Initializing sources")


def is_worker_start_failure(failure: BaseException | str) -> bool:
    """Whether an error (or a process's output) is Spark's Python-worker start bound, and only that."""
    text = failure if isinstance(failure, str) else f"{failure} {getattr(failure, '_stackTrace', '')}"
    return SPARK_WORKER_START_FAILURE in text or SPARK_WORKER_START_TIMEOUT in text


def _sources_created_check(query: StreamingQuery) -> Callable[[], bool]:
    def created() -> bool:
        return not query.isActive or query.status.get("message") not in _STARTING

    return created


def start_query(start: Callable[[], StreamingQuery], *, starts_max: int = QUERY_STARTS_MAX) -> StreamingQuery:
    """`start()` a streaming query and wait (on progress, minutes) until it created its sources;
    a query that failed there on Spark's worker start bound is started again, at most
    `starts_max` times in all. Any other failure stays with the query, for the test to see."""
    assert starts_max >= 1
    for attempt in range(1, starts_max + 1):
        query = start()
        created = _sources_created_check(query)
        wait_on_progress("streaming query creating its sources", created, bool)
        failure = None if query.isActive else query.exception()
        if failure is None or not is_worker_start_failure(failure) or attempt == starts_max:
            return query
        log.warning("streaming query %s: Spark's Python worker missed its start bound, start %d of %d",
                    query.name or query.id, attempt, starts_max)
    raise AssertionError("unreachable")
