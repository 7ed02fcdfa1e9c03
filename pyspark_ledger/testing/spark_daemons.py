"""Spark's own JVM processes (a standalone master, its workers, a Spark Connect server), started
from the pip-installed pyspark and stopped by the process group this module created.

Each daemon runs in a new session (its own process group), so its children (a worker's
executors and their Python workers, a Connect server's Python workers) are in that group too:
stopping the daemon signals exactly that group and nothing else on the machine. Every wait is
bounded and fails with the daemon's log tail.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark_ledger.errors import PySparkLedgerError

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 20.0
HTTP_TIMEOUT_S = 5.0


class SparkStartError(PySparkLedgerError, RuntimeError):
    pass


def spark_home() -> Path:
    """The pip-installed pyspark package: it ships bin/spark-class, bin/spark-submit and jars/."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def repo_root() -> Path:
    """The directory `pyspark_ledger` was imported from: what executors' Python workers need on
    PYTHONPATH to import the same code as the driver (an editable install's path file may name
    another checkout, and a worker on another machine has none)."""
    import pyspark_ledger

    return Path(pyspark_ledger.__file__).resolve().parents[1]


def daemon_env(work_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a Spark daemon: loopback only, this interpreter for Python workers,
    this repository importable, logs and pid files under work_dir."""
    env = dict(os.environ)
    python_path = [str(repo_root()), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env.update({
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(work_dir / "logs"),
        "SPARK_PID_DIR": str(work_dir),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(dict.fromkeys(python_path)),
    })
    env.update(extra)
    return env


def http_json(url: str) -> Any:
    """GET a Spark web UI's JSON (loopback only), within HTTP_TIMEOUT_S."""
    if not url.startswith(("http://127.", "http://localhost")):
        raise ValueError(f"{url}: only loopback web UIs are read")
    with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as response:
        return json.loads(response.read())


class SparkDaemon:
    """One Spark JVM this process started (through bin/spark-class or bin/spark-submit, which
    exec java: the PID is the JVM's), in a process group of its own."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], log_path: Path):
        self.name = name
        self.command = command
        self.env = env
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> SparkDaemon:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(self.command, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=self.env, start_new_session=True)
        log.info("started spark daemon name=%s pid=%s", self.name, self.proc.pid)
        return self

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise SparkStartError(f"{self.name} is not started")
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail_log(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def wait_until(self, ready: Callable[[], bool], timeout_s: float, what: str) -> None:
        """Poll `ready` (errors count as not ready) until it holds, the daemon exits, or timeout_s."""
        deadline = time.monotonic() + timeout_s
        while True:
            if not self.running:
                code = None if self.proc is None else self.proc.returncode
                raise SparkStartError(f"{self.name} exited with {code} before {what}:\n{self.tail_log()}")
            try:
                if ready():
                    return
            except (OSError, ValueError):  # not listening yet, or a half-written answer
                pass
            if time.monotonic() > deadline:
                raise SparkStartError(f"{self.name}: not {what} after {timeout_s:g} s:\n{self.tail_log()}")
            time.sleep(0.25)

    def stop(self) -> None:
        """SIGTERM to the daemon's process group (the JVM runs its shutdown hooks: a worker stops
        its executors), then SIGKILL to what is left of the group, at the latest STOP_TIMEOUT_S
        later. The JVM is reaped only after that, so its PID (the group's id) cannot have been
        handed to another process while we signal the group."""
        if self.proc is None:
            return
        pgid = self.proc.pid  # start_new_session: the group is the daemon's own
        self._signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while not self._exited_unreaped(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not self._exited_unreaped(pgid):
            log.warning("spark daemon did not stop in time, killing name=%s pid=%s", self.name, pgid)
        self._signal_group(pgid, signal.SIGKILL)  # the JVM if it hung, children that outlived it
        self.proc.wait(timeout=STOP_TIMEOUT_S)
        self.proc = None

    @staticmethod
    def _exited_unreaped(pid: int) -> bool:
        """Has our child exited? Asked with WNOWAIT: the zombie keeps its PID reserved."""
        try:
            return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True

    @staticmethod
    def _signal_group(pgid: int, sig: signal.Signals) -> None:
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass
