"""A standalone Spark cluster (a master and two workers of one core and 512m each, started from
the pip-installed pyspark): the `ledger` source's batch and streaming paths run in executor
processes that the workers started, not in the driver, against a LocalCluster of real bookies."""

from __future__ import annotations

from pathlib import Path

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.driver_process import DriverProcess
from pyspark_ledger.testing.spark_standalone import StandaloneSpark
from tests.spark_cluster.log_io import STEP_S, log_payloads, produce

EXECUTOR = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


def test_tasks_run_in_the_executors_the_workers_started(standalone: StandaloneSpark,
                                                        standalone_driver: DriverProcess) -> None:
    assert standalone_driver.call("wait_for_executors", STEP_S, count=2, timeout_s=120) == 2
    driver = standalone_driver.call("driver_processes", STEP_S)
    tasks = standalone_driver.call("task_processes", STEP_S, tasks=8)
    on_workers = standalone.executors_of(driver["app_id"])  # worker PID -> executor ids, as the workers say
    assert sorted(len(ids) for ids in on_workers.values()) == [1, 1]  # one executor on each worker
    assert len(tasks) == 8
    for t in tasks:
        assert t["jvm_main"] == EXECUTOR
        assert t["executor_id"] in on_workers[t["jvm_parent_pid"]]  # the executor is that worker's child
        assert t["jvm_pid"] != driver["jvm_pid"] and t["pid"] != driver["pid"]
    assert {t["executor_id"] for t in tasks} == {ids[0] for ids in on_workers.values()}  # both executors ran tasks


def test_raw_write_then_read_through_the_cluster(standalone_driver: DriverProcess, client: LedgerClient, uri: str,
                                                 log_name: str) -> None:
    payloads = [f"event-{i:04d}" for i in range(500)]
    standalone_driver.call("write_raw", STEP_S, uri=uri, log=log_name, payloads=payloads, partitions=2)
    assert len(client.describe_log(log_name).ledgers) == 2  # one ledger per write task
    written = [p.decode() for p in log_payloads(client, log_name)]
    assert sorted(written) == payloads  # every row once (the log keeps the tasks' order)
    assert standalone_driver.call("read_raw", STEP_S, uri=uri, log=log_name) == written


def test_arrow_write_then_read_through_the_cluster(standalone_driver: DriverProcess, client: LedgerClient, uri: str,
                                                   log_name: str) -> None:
    rows = [[i, f"name-{i}", i / 4] for i in range(1000)]
    standalone_driver.call("write_arrow", STEP_S, uri=uri, log=log_name, rows=rows, partitions=2, batch_rows=64)
    back = standalone_driver.call("read_arrow", STEP_S, uri=uri, log=log_name)
    assert back["columns"] == ["id", "name", "score", "log", "seq", "ledger", "entry", "index", "timestamp"]
    assert sorted(back["rows"]) == rows
    with client.open_log_reader(log_name) as reader:
        entries = sum(1 for _ in reader.read())
    assert back["entries"] == entries and entries >= 1000 // 64  # many rows per Arrow entry


def test_stream_copies_every_entry_once_across_restarts(standalone_driver: DriverProcess, client: LedgerClient,
                                                        uri: str, log_name: str, tmp_path: Path) -> None:
    sink, checkpoint = log_name + "-out", str(tmp_path / "checkpoint")
    first = [b"first-%04d" % i for i in range(250)]
    produce(client, log_name, first, rollover=120)
    batches = standalone_driver.call("stream_copy", STEP_S, uri=uri, source=log_name, sink=sink, checkpoint=checkpoint,
                                     max_entries=150, timeout_s=240)
    assert sum(batches) == 250 and max(batches) <= 150  # admission control held
    assert log_payloads(client, sink) == first
    more = [b"more-%04d" % i for i in range(100)]
    produce(client, log_name, more, rollover=120)
    batches = standalone_driver.call("stream_copy", STEP_S, uri=uri, source=log_name, sink=sink, checkpoint=checkpoint,
                                     max_entries=150, timeout_s=240)
    assert sum(batches) == 100  # the restart resumed from the checkpoint: nothing read twice
    assert log_payloads(client, sink) == first + more
