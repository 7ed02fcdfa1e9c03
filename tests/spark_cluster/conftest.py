"""Spark where it really runs: a standalone cluster (a master, two workers, executors in
processes of their own) and a Spark Connect server, each started once per module from the
pip-installed pyspark, against one LocalCluster of three real bookies.

The Spark side of each test runs in a driver process of its own (tests/spark_cluster/driver.py,
pyspark_ledger.testing.driver_process): a Python process holds one SparkContext (tests/spark's
local session lives in this one), and a Connect client turns its whole process into a Connect
client. The tests check what those processes did with a LedgerClient of their own.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyspark_ledger.testing.driver_process import DriverProcess
from pyspark_ledger.testing.spark_connect import ConnectServer
from pyspark_ledger.testing.spark_standalone import StandaloneSpark
from tests.spark.conftest import client, ledger_cluster, log_name, uri  # the same real bookies as tests/spark

__all__ = ["client", "ledger_cluster", "log_name", "uri"]  # fixtures, used by name

REPO = Path(__file__).resolve().parents[2]
# A driver's session start: ~10 s idle, several times that when the machine is busy.
DRIVER_START_S = 240.0


def driver_env() -> dict[str, str]:
    """The test process's environment, with this repository first on PYTHONPATH (the driver
    imports tests.spark_cluster.steps)."""
    paths = [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)), "SPARK_LOCAL_IP": "127.0.0.1"}


def start_driver(log_path: Path, *args: str) -> DriverProcess:
    argv = [sys.executable, "-m", "tests.spark_cluster.driver", *args]
    return DriverProcess(argv, env=driver_env(), cwd=REPO, log_path=log_path).start(DRIVER_START_S)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneSpark]:
    with StandaloneSpark(tmp_path_factory.mktemp("spark-standalone"), workers=2, worker_cores=1,
                         worker_memory="512m") as cluster:
        yield cluster


@pytest.fixture(scope="module")
def standalone_driver(standalone: StandaloneSpark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DriverProcess]:
    log_path = tmp_path_factory.mktemp("standalone-driver") / "driver.log"
    driver = start_driver(log_path, "standalone", standalone.master_url, json.dumps(standalone.driver_conf()))
    try:
        yield driver
    finally:
        driver.close()


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    with ConnectServer(tmp_path_factory.mktemp("spark-connect"), master="local[2]") as server:
        yield server


@pytest.fixture(scope="module")
def connect_client(connect_server: ConnectServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DriverProcess]:
    """A Connect client that registered the `ledger` source (spark.dataSource.register)."""
    log_path = tmp_path_factory.mktemp("connect-client") / "client.log"
    driver = start_driver(log_path, "connect", connect_server.url)
    try:
        yield driver
    finally:
        driver.close()
