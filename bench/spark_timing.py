"""What the Spark benchmarks share: the rows' payload, the noop sink, a do-nothing Python data
source writer (`nullsink`), alternating timed pairs, and the CPU of the processes a run starts.

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


TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def _procs() -> dict[int, tuple[int, float, str]]:
    """pid -> (parent pid, CPU seconds so far, command line) of every process we can read."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone meanwhile
        # utime + stime + cutime + cstime: Python workers that exited count in their daemon's figure.
        out[int(entry)] = (int(fields[1]), sum(int(x) for x in fields[11:15]) / TICKS_PER_S, cmd)
    return out


def cpu_by_kind() -> dict[str, float]:
    """CPU seconds so far of this process's descendants, by kind: the Spark JVM, its Python
    workers, the bookies (other processes on the machine are not counted)."""
    procs = _procs()
    mine = {os.getpid()}
    changed = True
    while changed:
        changed = False
        for pid, (ppid, _, _) in procs.items():
            if ppid in mine and pid not in mine:
                mine.add(pid)
                changed = True
    kinds = {"jvm": 0.0, "python workers": 0.0, "bookies": 0.0}
    for pid in mine - {os.getpid()}:
        _, cpu, cmd = procs[pid]
        kind = "jvm" if "java" in cmd else "python workers" if "pyspark" in cmd else "bookies" if "bookie" in cmd else None
        if kind is not None:
            kinds[kind] += cpu
    return kinds


def timed_pair_cpu(ours: Callable[[], None], theirs: Callable[[], None], rounds: int) -> dict[str, float]:
    """timed_pair, and the median CPU seconds per run of this process's Spark JVM, Python workers
    and bookies together (cpu_by_kind): on a shared machine whose load changes minute by minute
    the CPU a query costs moves much less than its wall time."""
    fns = (ours, theirs)
    times: tuple[list[float], list[float]] = ([], [])
    cpus: tuple[list[float], list[float]] = ([], [])
    for fn in fns:
        fn()
        os.sync()
    for r in range(rounds):
        for k in (0, 1) if r % 2 == 0 else (1, 0):
            cpu0 = sum(cpu_by_kind().values())
            start = time.perf_counter()
            fns[k]()
            times[k].append(time.perf_counter() - start)
            cpus[k].append(sum(cpu_by_kind().values()) - cpu0)
            os.sync()
    return {"ours_s": statistics.median(times[0]), "theirs_s": statistics.median(times[1]),
            "ours_cpu": statistics.median(cpus[0]), "theirs_cpu": statistics.median(cpus[1])}


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
