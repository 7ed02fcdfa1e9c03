"""What the Spark benchmarks share: the rows' payload, the noop sink, a do-nothing Python data
source writer (`nullsink`), and alternating timed pairs.

A leaf module: it changes nothing on sys.path, so a bench that runs another source tree
(spark_read_ab.py's children) can import it without taking this tree's pyspark_ledger along.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from pyspark import cloudpickle
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage


def payload_column(kind: str) -> F.Column:
    if kind == "text":
        return F.expr("cast(lpad(cast(id as string), 100, 'x') as binary)")
    # 128 pseudo-random bytes per row (two differently salted SHA-512s, so no row repeats a
    # neighbour's bytes), cut to 100: nothing for LZ4 or snappy to find.
    return F.expr("substring(concat(unhex(sha2(concat('a', cast(id as string)), 512)), "
                  "unhex(sha2(concat('b', cast(id as string)), 512))), 1, 100)")


def timed_pair(ours: Callable[[], None], theirs: Callable[[], None], rounds: int) -> tuple[float, float]:
    """Median seconds of `ours` and of `theirs`, run alternately after a warm-up of each."""
    fns = (ours, theirs)
    times: tuple[list[float], list[float]] = ([], [])
    for fn in fns:
        fn()  # warm-up: Python workers, JIT, page cache
        os.sync()
    for r in range(rounds):
        for k in (0, 1) if r % 2 == 0 else (1, 0):
            start = time.perf_counter()
            fns[k]()
            times[k].append(time.perf_counter() - start)
            # Write back what the run left dirty in the page cache (Parquet's files, the bookies'
            # entry logs), untimed, so that no run is measured during the kernel's writeback of another.
            os.sync()
    return statistics.median(times[0]), statistics.median(times[1])


def noop(df: Any) -> None:
    """Force a whole read (a count() on Parquet would read only footers)."""
    df.write.format("noop").mode("overwrite").save()


class NullArrowWriter(DataSourceArrowWriter):
    """Takes every Arrow batch Spark hands the Python worker and drops it: what any Python data
    source's write costs before it does anything (the ceiling of such a write)."""

    def write(self, iterator: Any) -> WriterCommitMessage:
        for _batch in iterator:
            pass
        return WriterCommitMessage()


class NullSink(DataSource):
    @classmethod
    def name(cls) -> str:
        return "nullsink"

    def writer(self, schema: Any, overwrite: bool) -> NullArrowWriter:
        return NullArrowWriter()


def register_nullsink(spark: Any) -> None:
    """Make format("nullsink") available. This module is on the driver's path only (the benches
    put bench/ there), so its classes travel to the workers by value."""
    import sys

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(NullSink)
