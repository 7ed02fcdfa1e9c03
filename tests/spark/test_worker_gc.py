"""The data source freezes a reused Spark worker's long-lived objects once (worker_gc), and
touches no other process. Each case runs in a child process: gc.freeze is process-wide."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# What open_client does first in every Spark worker, then what the daemon does after each task.
CHILD = """
import gc, json
from pyspark_ledger.datasource.worker_gc import freeze_worker_heap
first, again = freeze_worker_heap(), freeze_worker_heap()
frozen = gc.get_freeze_count()
garbage = [[] for _ in range(1000)]
for item in garbage:
    item.append(item)  # 1000 reference cycles made after the freeze
del garbage, item
print(json.dumps({"first": first, "again": again, "frozen": frozen, "collected": gc.collect()}))
"""


def run_child(env: dict[str, str]) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", CHILD], cwd=REPO, env={"PATH": "/usr/bin:/bin", **env},
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_reused_spark_worker_freezes_once_and_still_collects_new_garbage() -> None:
    got = run_child({"SPARK_REUSE_WORKER": "1"})
    assert got["first"] is True and got["again"] is True  # cached: one freeze per process
    assert got["frozen"] > 1_000  # what the imports made: modules, classes, functions
    assert got["collected"] == 1000  # the cycles made after the freeze are still found


@pytest.mark.parametrize("env", [
    {},  # a driver, a producer, a test: any process that is not a reused Spark worker
    {"SPARK_REUSE_WORKER": "1", "PYSPARK_LEDGER_GC_FREEZE": "0"},
    {"SPARK_REUSE_WORKER": "1", "PYSPARK_LEDGER_GC_FREEZE": "off"},
])
def test_other_processes_and_the_opt_out_keep_their_collector(env: dict[str, str]) -> None:
    got = run_child(env)
    assert got["first"] is False and got["frozen"] == 0


# A worker's read tasks: the first leaves long-lived objects behind (its client, lazy imports),
# frozen at the second task's start, never at the others.
TASKS = """
import gc, json
from pyspark_ledger.datasource.worker_gc import freeze_after_first_task
kept = []
frozen = []
for task in range(4):
    done = freeze_after_first_task()
    frozen.append([done, gc.get_freeze_count()])
    kept.append([object() for _ in range(500)] if task == 0 else None)  # lives as long as the worker
    gc.collect()  # the daemon, after each task
print(json.dumps({"frozen": frozen}))
"""


def test_the_second_read_task_freezes_what_the_first_left() -> None:
    out = subprocess.run([sys.executable, "-c", TASKS], cwd=REPO, env={"PATH": "/usr/bin:/bin", "SPARK_REUSE_WORKER": "1"},
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    frozen = json.loads(out.stdout)["frozen"]
    assert [done for done, _ in frozen] == [False, True, False, False]
    assert frozen[0][1] == 0 and frozen[1][1] > 500 and frozen[2][1] == frozen[3][1] == frozen[1][1]
