"""Python's cyclic garbage collector in Spark's reused Python workers.

Spark reuses its Python workers (spark.python.worker.reuse, on by default), and its daemon runs a
full `gc.collect()` after every task of a reused worker (pyspark/daemon.py), planning tasks
included. A worker that has loaded this package with pyarrow, grpc and protobuf tracks about
72k objects, almost all of them modules, classes and functions that live as long as the
process: one such collection took 29-52 ms there on the 2-core reference machine during a read.
Each reading worker paid it after every task, and each planning worker after every query; in
profiles of 2M-row Arrow reads, collections were about 6% of all CPU.

`gc.freeze()` moves every object tracked now into a permanent generation that collections skip.
Reference counting still frees those objects; only a reference cycle among them would stay,
which is why the live set is collected once first. Objects made later (each task's client,
buffers, Spark's per-task state) are collected as before. Applied once per process, only in a
reused Spark worker (SPARK_REUSE_WORKER, which Spark sets exactly when its daemon collects after
each task), so a driver or any other process that imports the client keeps its collector as it
was. PYSPARK_LEDGER_GC_FREEZE=0 (e.g. as spark.executorEnv.PYSPARK_LEDGER_GC_FREEZE) opts out.

Once more at the start of a reading worker's second task (freeze_after_first_task): the first
task makes another ~31k objects that live as long as the worker (the cached client and its gRPC
channels, modules imported on first use such as pyarrow.compute's functions); counted at each
later task's start, the unfrozen set stayed at ~30.8k, and each collection after a task still took
about 20 ms of a 2M-row read's worker. At that point the daemon has just collected after the
first task, so what is frozen is those objects plus the new task's few of its own.
"""

from __future__ import annotations

import functools
import gc
import itertools
import os

from bookie.opt_out import opted_out

OPT_OUT_ENV = "PYSPARK_LEDGER_GC_FREEZE"


@functools.cache
def freeze_worker_heap() -> bool:
    """Freeze the objects alive now, once per process, if this is a reused Spark Python worker
    and the operator did not opt out. True if frozen."""
    if opted_out(OPT_OUT_ENV):
        return False
    if not os.environ.get("SPARK_REUSE_WORKER"):
        return False
    gc.collect()
    gc.freeze()
    return True


_read_tasks = itertools.count()  # read tasks started in this process (next() is atomic under the GIL)


def freeze_after_first_task() -> bool:
    """Called as each read task starts: at the second, freeze again (see the module doc). True if frozen."""
    if next(_read_tasks) != 1 or opted_out(OPT_OUT_ENV) or not os.environ.get("SPARK_REUSE_WORKER"):
        return False
    gc.freeze()
    return True
