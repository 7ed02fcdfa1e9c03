"""A standalone Spark cluster on loopback: one master and N workers, real JVM processes started
from the pip-installed pyspark (`bin/spark-class org.apache.spark.deploy.master.Master` and
`...deploy.worker.Worker`), each worker with its own work directory, cores and memory, its
executors in processes of their own. For tests that need Spark to run where it really runs in
production: a driver, and executors that are other processes.

    with StandaloneSpark(tmp_dir) as cluster:
        spark = local_spark_session("app", master=cluster.master_url, conf=cluster.driver_conf())

Stopping stops exactly the process groups this object started (spark_daemons.SparkDaemon).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from pyspark_ledger.testing.spark_daemons import SparkDaemon, daemon_env, http_json, repo_root, spark_home
from pyspark_ledger.testing.zookeeper_server import free_port

log = logging.getLogger(__name__)

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
# A JVM starts in 5-10 s here; on a machine busy with other tests (load 10+) it took up to 30 s.
START_TIMEOUT_S = 120.0
# The master's REST submission server listens on a fixed port (6066) unless turned off; workers
# keep finished applications' directories (the test's tmp dir removes them).
# The master's and workers' own heaps (executors get the worker's memory).
DAEMON_MEMORY = "256m"
DAEMON_PROPERTIES = "spark.master.rest.enabled false\nspark.worker.cleanup.enabled false\n"


class StandaloneSpark:
    def __init__(self, work_dir: str | Path, *, workers: int = 2, worker_cores: int = 1, worker_memory: str = "512m"):
        if workers < 1 or worker_cores < 1:
            raise ValueError(f"a cluster needs at least one worker with one core (workers={workers}, cores={worker_cores})")
        self.work_dir = Path(work_dir)
        self.num_workers = workers
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.master_port = free_port()
        self.master_ui_port = free_port()
        self.master: SparkDaemon | None = None
        self.workers: list[SparkDaemon] = []
        self.worker_ui_ports: list[int] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def master_state(self) -> dict[str, Any]:
        """The master's own view (its web UI's /json/): status, alive workers, applications."""
        state: dict[str, Any] = http_json(f"http://127.0.0.1:{self.master_ui_port}/json/")
        return state

    def _spark_class(self, main_class: str, *args: str) -> list[str]:
        return [str(spark_home() / "bin" / "spark-class"), main_class, *args,
                "--properties-file", str(self.work_dir / "daemon.properties")]

    def start(self) -> StandaloneSpark:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        (self.work_dir / "daemon.properties").write_text(DAEMON_PROPERTIES)
        env = daemon_env(self.work_dir, SPARK_DAEMON_MEMORY=DAEMON_MEMORY)
        try:
            self.master = SparkDaemon("spark master", self._spark_class(
                MASTER_CLASS, "--host", "127.0.0.1", "--port", str(self.master_port),
                "--webui-port", str(self.master_ui_port)), env, self.work_dir / "master.log").start()
            for i in range(self.num_workers):
                self._start_worker(i, env)
            self.master.wait_until(lambda: self.master_state().get("status") == "ALIVE", START_TIMEOUT_S, "ALIVE")
            self.master.wait_until(lambda: self.master_state().get("aliveworkers") == self.num_workers,
                                   START_TIMEOUT_S, f"serving {self.num_workers} workers")
        except BaseException:
            self.close()
            raise
        log.info("standalone spark started master=%s workers=%d", self.master_url, self.num_workers)
        return self

    def _start_worker(self, i: int, env: dict[str, str]) -> None:
        ui_port = free_port()
        work = self.work_dir / f"worker-{i}"
        work.mkdir(parents=True, exist_ok=True)
        self.worker_ui_ports.append(ui_port)
        self.workers.append(SparkDaemon(f"spark worker {i}", self._spark_class(
            WORKER_CLASS, "--host", "127.0.0.1", "--port", str(free_port()), "--webui-port", str(ui_port),
            "--cores", str(self.worker_cores), "--memory", self.worker_memory, "--work-dir", str(work),
            self.master_url), env, self.work_dir / f"worker-{i}.log").start())

    def executors_of(self, app_id: str) -> dict[int, list[str]]:
        """Worker PID -> the ids of the executors it runs for application app_id (workers' /json/)."""
        out: dict[int, list[str]] = {}
        for worker, port in zip(self.workers, self.worker_ui_ports):
            state = http_json(f"http://127.0.0.1:{port}/json/")
            out[worker.pid] = [str(e["id"]) for e in state.get("executors", []) if e.get("appid") == app_id]
        return out

    def driver_conf(self) -> dict[str, str]:
        """Settings for a driver on this cluster (with local_spark_session's loopback settings):
        one executor of the worker's size per worker, this interpreter and this repository for
        the executors' Python workers (the repository on spark.executorEnv.PYTHONPATH)."""
        return {
            "spark.executor.cores": str(self.worker_cores),
            "spark.executor.memory": self.worker_memory,
            "spark.cores.max": str(self.worker_cores * self.num_workers),
            "spark.pyspark.python": sys.executable,
            "spark.executorEnv.PYTHONPATH": str(repo_root()),
            "spark.sql.shuffle.partitions": str(self.worker_cores * self.num_workers),
        }

    def close(self) -> None:
        """Workers first (each stops its executors), then the master; each by its process group."""
        for daemon in [*self.workers, *([self.master] if self.master else [])]:
            try:
                daemon.stop()
            except Exception:  # keep stopping the others; the failure is logged
                log.exception("stopping %s failed", daemon.name)
        self.workers = []
        self.master = None

    def __enter__(self) -> StandaloneSpark:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
