"""Where a Spark task really ran: called inside a task (a UDF, mapPartitions), it names the
Python worker's process and the JVM it serves, read from /proc (Linux).

A Python worker is forked by its JVM (an executor, or the driver in local mode, or a Spark
Connect server), directly or through pyspark's daemon, so the nearest java ancestor is the JVM
that ran the task. On a standalone cluster that JVM is `CoarseGrainedExecutorBackend
--executor-id N`, a child of a worker.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

ANCESTORS_MAX = 16  # worker <- daemon <- JVM is 2 steps; bounded in case /proc is odd


def _cmdline(pid: int) -> list[str]:
    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _parent(pid: int) -> int:
    # /proc/PID/stat: "pid (comm) state ppid ..."; comm may hold spaces and parentheses.
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[1])


def _flag(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args and args.index(flag) + 1 < len(args) else None


def task_process() -> dict[str, Any]:
    """{"pid": this Python worker, "jvm_pid": the JVM above it, "jvm_parent_pid": that JVM's
    parent, "executor_id": the JVM's --executor-id (None for a driver or a Connect server),
    "jvm_main": the JVM's main class}; JSON-able, for a task to return."""
    pid = os.getpid()
    current = pid
    for _ in range(ANCESTORS_MAX):
        current = _parent(current)
        if current <= 1:
            break
        args = _cmdline(current)
        if args and os.path.basename(args[0]) == "java":
            main = next((a for a in args if a.startswith("org.apache.spark.")), None)
            return {"pid": pid, "jvm_pid": current, "jvm_parent_pid": _parent(current),
                    "executor_id": _flag(args, "--executor-id"), "jvm_main": main}
    return {"pid": pid, "jvm_pid": None, "jvm_parent_pid": None, "executor_id": None, "jvm_main": None}
