"""A Spark driver (or Spark Connect client) in a Python process of its own, which a test asks to
run named steps, one JSON line per request and per answer.

Why a process of its own: a Python process holds one SparkContext, and a Spark Connect client
switches the whole process to Connect mode (pyspark sets SPARK_CONNECT_MODE_ENABLED in
os.environ), so a test suite that also has a local session keeps other sessions out of its own
process. The process starts its session once and serves many requests, so the session's start
(~6.5 s here) is paid once.

Parent side: `DriverProcess(argv, ...).start()`, then `call("step", timeout_s, **kwargs)`.
Child side: `serve({"step": function, ...})`, where each function takes keyword arguments and
returns something JSON-able. The protocol has its own file descriptor: the child moves stdout
onto stderr (the log) before anything else prints, so a JVM's or a library's output never
mixes into the answers.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from pyspark_ledger.errors import PySparkLedgerError

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 30.0
ANSWER_BYTES_MAX = 64 << 20  # an answer is a test's result, not a data set


class DriverError(PySparkLedgerError, RuntimeError):
    """A step failed in the driver process: str() is str() of the exception the step raised
    there (what a user of that session would catch), type_name its class name."""

    def __init__(self, message: str, type_name: str = "", remote_traceback: str = ""):
        super().__init__(message)
        self.type_name = type_name
        self.remote_traceback = remote_traceback


class DriverProcess:
    def __init__(self, argv: list[str], *, env: dict[str, str] | None = None, cwd: str | Path | None = None,
                 log_path: Path):
        self.argv = argv
        self.env = env
        self.cwd = cwd
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self._buffer = b""

    def start(self, ready_timeout_s: float) -> DriverProcess:
        """Start the process and wait for its first answer (it sends one when its session is up)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=logf,
                                         env=self.env, cwd=self.cwd, start_new_session=True)
        try:
            self._answer(ready_timeout_s, "start")
        except BaseException:
            self.close()
            raise
        return self

    def call(self, step: str, timeout_s: float, /, **kwargs: Any) -> Any:
        proc = self._proc()
        assert proc.stdin is not None
        proc.stdin.write((json.dumps({"step": step, "kwargs": kwargs}) + "\n").encode())
        proc.stdin.flush()
        return self._answer(timeout_s, step)

    def _proc(self) -> subprocess.Popen[bytes]:
        if self.proc is None:
            raise DriverError("the driver process is not running")
        return self.proc

    def _answer(self, timeout_s: float, step: str) -> Any:
        answer = json.loads(self._read_line(timeout_s, step))
        if "error" in answer:
            raise DriverError(answer["error"], answer.get("type", ""), answer.get("traceback", ""))
        return answer["result"]

    def _read_line(self, timeout_s: float, step: str) -> bytes:
        proc = self._proc()
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DriverError(f"driver step {step!r}: no answer after {timeout_s:g} s\n{self.tail_log()}")
            readable, _, _ = select.select([fd], [], [], remaining)
            if not readable:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise DriverError(f"driver step {step!r}: the driver exited ({proc.poll()})\n{self.tail_log()}")
            self._buffer += chunk
            if len(self._buffer) > ANSWER_BYTES_MAX:
                raise DriverError(f"driver step {step!r}: answer over {ANSWER_BYTES_MAX} bytes")
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def tail_log(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def close(self) -> None:
        """Close its stdin (serve() returns and stops its session), then wait; kill its process
        group if it does not exit within STOP_TIMEOUT_S."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        if proc.stdin is not None:
            try:
                proc.stdin.close()
            except BrokenPipeError:
                pass
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            log.warning("driver process did not exit, killing its group pid=%s", proc.pid)
            os.killpg(proc.pid, signal.SIGKILL)  # still unreaped: the group id is still ours
            proc.wait(timeout=STOP_TIMEOUT_S)
        if proc.stdout is not None:
            proc.stdout.close()


def protocol_channel() -> TextIO:
    """In the child, before anything else: a private copy of stdout for answers, and stdout
    itself pointed at stderr (the parent's log file)."""
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    return channel


def serve(channel: TextIO, steps: dict[str, Callable[..., Any]], ready: Any = None) -> None:
    """Answer `ready`, then one request per stdin line until stdin closes."""
    channel.write(json.dumps({"result": ready}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        try:
            answer = {"result": steps[request["step"]](**request["kwargs"])}
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the caller as its answer
            answer = {"error": str(exc), "type": type(exc).__name__, "traceback": traceback.format_exc()}
        channel.write(json.dumps(answer) + "\n")
