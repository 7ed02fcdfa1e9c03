"""One fault round: a writer process appends a bounded workload to a fresh log while a tailing
reader follows it; the fault runs once a quarter of the workload is acknowledged; then every
acknowledgement is checked against the whole log read back (pyspark_ledger.testing.fault_check)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from pyspark_ledger.testing.fault_check import FaultCounters, RunRecord, check
from tests.faults.harness import FaultCluster, LogTailer, WriterProcess, read_log

ADD_TIMEOUT_S = 2.0
FAULT_S = 5.0  # a pause or partition: past the add timeout, under the bookies' ZooKeeper session timeout
_names = itertools.count()


@dataclass
class Workload:
    total: int = 1600
    size: int = 1024
    window: int = 16
    pause_s: float = 0.02  # ~100 windows: the fault lands while the writer still writes


@dataclass
class Round:
    """What a fault sees: the cluster, the log's name and its writers so far (it may start more)."""

    fc: FaultCluster
    log_name: str
    writers: list[WriterProcess]
    workload: Workload

    def start_writer(self, name: str, total: int | None = None) -> WriterProcess:
        w = WriterProcess(self.fc.metadata_uri, self.log_name, name, total=total or self.workload.total,
                          size=self.workload.size, window=self.workload.window, add_timeout_s=ADD_TIMEOUT_S,
                          pause_s=self.workload.pause_s)
        self.writers.append(w)
        return w


def run_round(fc: FaultCluster, kind: str, fault: Callable[[Round], None], workload: Workload | None = None,
              *, after: Callable[[Round], None] | None = None) -> tuple[FaultCounters, list[str]]:
    """Returns the counters and the writers' outcomes (DONE / STOPPED <error>) in start order.
    `after` runs once every writer ended, before the read-back (e.g. corrupting replicas)."""
    rnd = Round(fc, f"{kind}-{next(_names)}", [], workload or Workload())
    first = rnd.start_writer("a")
    tailer = None
    record = RunRecord()
    try:
        first.wait_acks(rnd.workload.total // 4)
        tailer = LogTailer(fc.metadata_uri, rnd.log_name)
        fault(rnd)
        for w in rnd.writers:
            if not w.wait_exit():
                record.stalled.append(f"writer {w.writer} did not exit")
        if after is not None:
            after(rnd)
    finally:
        for w in rnd.writers:
            w.kill()
        if tailer is not None and not tailer.stop():
            record.stalled.append("tailing reader did not end")
    record.writers = [w.writer for w in rnd.writers]
    record.acked = {w.writer: w.acked() for w in rnd.writers}
    record.stalled += [f"writer {w.writer}: {s}" for w in rnd.writers for s in w.stalls()]
    record.tailed = tailer.entries if tailer is not None else []
    entries = read_log(fc.metadata_uri, rnd.log_name)
    if entries is None:
        record.stalled.append("read-back did not end")
        entries = []
    counters = check(record, entries)
    outcomes = [w.outcome() for w in rnd.writers]
    counters.writers_stopped = sum(1 for o in outcomes if not o.startswith("DONE"))
    return counters, outcomes
