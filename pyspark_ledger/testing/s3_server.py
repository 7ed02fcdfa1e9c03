"""Run the `moto` S3 server on 127.0.0.1 for tests and benchmarks: a real S3 API over HTTP.

Started as a child process (`python -m moto.server`), waited on until it answers, stopped by the
PID this module started (SIGTERM, then SIGKILL after a bound). Credentials are dummies moto
accepts; `env()` gives what a store client (pyspark_ledger/offload/store.py) reads.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from pyspark_ledger.errors import PySparkLedgerError
from pyspark_ledger.testing.zookeeper_server import free_port

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
ACCESS_KEY = "testing"
SECRET_KEY = "testing"  # moto's dummy credentials, loopback only


class S3ServerError(PySparkLedgerError, RuntimeError):
    pass


class LocalS3:
    def __init__(self, work_dir: str | Path, port: int | None = None):
        self.work_dir = Path(work_dir)
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        return {"LEDGER_S3_ENDPOINT": self.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": "us-east-1"}

    def start(self) -> LocalS3:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        logf = open(self.work_dir / "moto.log", "wb")
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                         stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            logf.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise S3ServerError(f"moto server exited with {self.proc.returncode}: {self.tail_log()}")
            try:
                urllib.request.urlopen(self.endpoint + "/", timeout=2).close()
                return self
            except (urllib.error.URLError, OSError):
                time.sleep(0.2)
        self.stop()
        raise S3ServerError(f"moto server did not answer within {START_TIMEOUT_S}s: {self.tail_log()}")

    def tail_log(self, lines: int = 20) -> str:
        try:
            return "\n".join((self.work_dir / "moto.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(STOP_TIMEOUT_S)

    def __enter__(self) -> LocalS3:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
