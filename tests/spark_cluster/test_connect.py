"""Spark Connect: the Connect server that ships with pyspark (local[2] behind it), a client that
registers the `ledger` source with spark.dataSource.register (the class travels pickled by
reference; the server's Python workers import pyspark_ledger from PYTHONPATH), and the source's
batch, streaming and error paths through it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.driver_process import DriverError, DriverProcess
from pyspark_ledger.testing.spark_connect import ConnectServer
from tests.spark_cluster.log_io import STEP_S, log_payloads, produce


def test_tasks_run_in_the_server_not_the_client(connect_server: ConnectServer, connect_client: DriverProcess) -> None:
    client_pid = connect_client.call("driver_processes", STEP_S)["pid"]
    tasks = connect_client.call("task_processes", STEP_S, tasks=4)
    assert len(tasks) == 4
    for t in tasks:
        assert t["jvm_pid"] == connect_server.pid  # the server's JVM ran the task (local[2] behind it)
        assert t["jvm_main"] == "org.apache.spark.deploy.SparkSubmit"
        assert client_pid not in (t["pid"], t["jvm_parent_pid"])


def test_raw_and_arrow_round_trips_over_connect(connect_client: DriverProcess, client: LedgerClient, uri: str,
                                                log_name: str) -> None:
    payloads = [f"event-{i:04d}" for i in range(300)]
    connect_client.call("write_raw", STEP_S, uri=uri, log=log_name, payloads=payloads, partitions=2)
    written = [p.decode() for p in log_payloads(client, log_name)]
    assert sorted(written) == payloads
    assert connect_client.call("read_raw", STEP_S, uri=uri, log=log_name) == written
    rows = [[i, f"name-{i}", i / 4] for i in range(400)]
    arrow_log = log_name + "-arrow"
    connect_client.call("write_arrow", STEP_S, uri=uri, log=arrow_log, rows=rows, partitions=2, batch_rows=64)
    back = connect_client.call("read_arrow", STEP_S, uri=uri, log=arrow_log)
    assert sorted(back["rows"]) == rows


def test_stream_over_connect_copies_every_entry_once(connect_client: DriverProcess, client: LedgerClient, uri: str,
                                                     log_name: str, tmp_path: Path) -> None:
    """One run (the standalone test restarts from the checkpoint): the query, its checkpoint and
    its sink's commits live in the server, the client only starts it and waits."""
    sink, payloads = log_name + "-out", [b"event-%04d" % i for i in range(250)]
    produce(client, log_name, payloads, rollover=100)
    batches = connect_client.call("stream_copy", STEP_S, uri=uri, source=log_name, sink=sink,
                                  checkpoint=str(tmp_path / "checkpoint"), max_entries=150, timeout_s=240)
    assert sum(batches) == 250 and max(batches) <= 150  # admission control held
    assert log_payloads(client, sink) == payloads


def test_a_user_mistake_reaches_the_connect_client_as_one_line(connect_client: DriverProcess, uri: str,
                                                               log_name: str) -> None:
    with pytest.raises(DriverError) as err:
        connect_client.call("count_with_options", STEP_S, uri=uri, options={"log": log_name, "statingPosition": "earliest"})
    assert err.value.type_name == "AnalysisException"
    assert str(err.value).splitlines()[0] == (
        "[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: "
        'pyspark_ledger.datasource.errors.OptionError: ledger data source option "statingposition": unknown option; '
        'did you mean "startingPosition"?')


def test_the_server_finds_the_source_without_registering(connect_server: ConnectServer, connect_client: DriverProcess,
                                                         client: LedgerClient, uri: str, log_name: str) -> None:
    """Spark's Python workers list the top-level pyspark_* modules on their sys.path (the server's
    PYTHONPATH has the repository), so format("ledger") works in a session that registered nothing."""
    produce(client, log_name, [b"a", b"b", b"c"], rollover=100)
    assert connect_client.call("read_raw_unregistered", STEP_S, url=connect_server.url, uri=uri, log=log_name) == [
        "a", "b", "c"]
