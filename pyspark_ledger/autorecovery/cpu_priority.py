"""Re-replication at a lower CPU priority than the writers it shares a machine with.

Measured (docs/autorecovery.md "Bulk re-replication, measured"): on a machine whose cores are busy,
a running writer kept about half its rate during a copy whatever the copy's read windows,
batches and in-flight bounds (0.38-0.53), and as much with bulk journal items (0.42-0.48); niced,
a median of 0.59 (0.47-0.93) in the same runs. The scheduler shares the cores between runnable
threads, and the autorecovery process's (reading survivors, checking digests, building batches)
are as runnable as the writer's and the bookies'. Every copy byte the bookies handle is asked for
by this process, so running it niced makes the whole copy yield: when the cores are idle it runs
at its pace, when a writer wants them the copy takes what is left.

`ledger autorecovery --cpu-nice N` (default 10) adds N to the niceness of the thread that starts
the service, like `nice -n`. On Linux niceness belongs to each thread and a new thread inherits
its creator's: the service's workers and the connections they open to bookies run niced, while
the threads the client started before (its ZooKeeper session's) keep their priority, so a busy
machine does not expire the session and with it the auditor's election and the workers' locks.
"""

from __future__ import annotations

import logging
import os

from pyspark_ledger.protocol.invariants import ensure

log = logging.getLogger(__name__)

NICE_MAX = 19  # the weakest priority Unix knows
CPU_NICE_DEFAULT = 10  # a weight of about a tenth of a nice-0 thread's (Linux CFS)


def check_cpu_nice(increment: int, flag: str) -> int:
    """An increment from the command line, or ValueError naming the flag."""
    if not 0 <= increment <= NICE_MAX:
        raise ValueError(f"{flag} must be in 0..{NICE_MAX}, got {increment}")
    return increment


def lower_cpu_priority(increment: int) -> int:
    """Add `increment` to the calling thread's niceness (at most NICE_MAX); threads it starts
    afterwards inherit it. Returns the niceness now in force; 0 changes nothing. A system that
    refuses is logged, not raised: the service works the same, only without yielding to writers."""
    check_cpu_nice(increment, "the CPU niceness increment")
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if increment == 0:
        return current
    target = min(current + increment, NICE_MAX)
    try:
        os.setpriority(os.PRIO_PROCESS, 0, target)  # Linux: this thread only (its children inherit)
    except OSError as exc:
        log.warning("could not lower the CPU priority niceness=%d error=%s", target, exc)
        return current
    now = os.getpriority(os.PRIO_PROCESS, 0)
    ensure(now == target, f"niceness {now}, not the {target} just set")
    log.info("re-replication runs at a lower CPU priority niceness=%d", now)
    return now
