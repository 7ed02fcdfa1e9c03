"""A Spark Connect server on loopback, the one that ships with pyspark (its jars/ hold
spark-connect_2.13-<version>.jar): `bin/spark-submit --class
org.apache.spark.sql.connect.service.SparkConnectServer`, which sbin/start-connect-server.sh
also runs, but in the foreground, so the process is this object's and stops by its group.

    with ConnectServer(tmp_dir) as server:
        spark = connect_session(server.url)      # SparkSession.builder.remote(...)

The server runs its own Spark (local[2] by default, or a standalone master's URL) and its
Python workers import the data source, so the server gets this interpreter and this repository
(PYTHONPATH, spark.executorEnv.PYTHONPATH). A client needs pyspark's `connect` extra (pandas,
grpcio-status, googleapis-common-protos, zstandard; the test extra has them).
"""

from __future__ import annotations

import logging
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark_ledger.testing.spark_daemons import SparkDaemon, daemon_env, repo_root, spark_home
from pyspark_ledger.testing.zookeeper_server import free_port

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
# The server is the driver of its own session (and, with local[N], its executor too).
DRIVER_MEMORY = "1g"
START_TIMEOUT_S = 180.0  # a JVM and a SparkSession; ~15 s idle, far more on a loaded machine


class ConnectServer:
    def __init__(self, work_dir: str | Path, *, master: str = "local[2]", conf: dict[str, str] | None = None):
        self.work_dir = Path(work_dir)
        self.master = master
        self.port = free_port()
        self.conf = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.pyspark.python": sys.executable,
            "spark.executorEnv.PYTHONPATH": str(repo_root()),
            "spark.executorEnv.MALLOC_ARENA_MAX": "1",
            **(conf or {}),
        }
        self.daemon: SparkDaemon | None = None

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        if self.daemon is None:
            raise ValueError("the Connect server is not started")
        return self.daemon.pid

    def command(self) -> list[str]:
        confs = [arg for key, value in self.conf.items() for arg in ("--conf", f"{key}={value}")]
        return [str(spark_home() / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--master", self.master,
                "--driver-memory", DRIVER_MEMORY,
                "--name", "pyspark-ledger connect server", *confs]

    def _listening(self) -> bool:
        with socket.create_connection(("127.0.0.1", self.port), timeout=1.0):
            return True

    def start(self) -> ConnectServer:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.daemon = SparkDaemon("spark connect server", self.command(), daemon_env(self.work_dir),
                                  self.work_dir / "connect-server.log").start()
        try:
            # The gRPC port opens after the server's SparkSession is up.
            self.daemon.wait_until(self._listening, START_TIMEOUT_S, f"listening on {self.port}")
        except BaseException:
            self.close()
            raise
        log.info("spark connect server started url=%s pid=%s", self.url, self.daemon.pid)
        return self

    def close(self) -> None:
        if self.daemon is not None:
            self.daemon.stop()
            self.daemon = None

    def __enter__(self) -> ConnectServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect_session(url: str, *, register: bool = True) -> SparkSession:
    """A Spark Connect client session. register: send the `ledger` source from this client
    (`spark.dataSource.register`, pickled by reference: the server's Python workers import
    pyspark_ledger). Note that pyspark marks the whole process as a Connect client
    (SPARK_CONNECT_MODE_ENABLED): use it in a process of its own next to classic sessions."""
    if not url.startswith("sc://127."):
        raise ValueError(f"{url}: only a loopback Connect server (sc://127.x.y.z:port)")
    from pyspark.sql import SparkSession

    from pyspark_ledger.datasource.source import LedgerDataSource

    spark = SparkSession.builder.remote(url).getOrCreate()
    if register:
        spark.dataSource.register(LedgerDataSource)
    return spark
