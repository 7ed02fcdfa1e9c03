"""The pid file of `ledger standalone` (<home>/standalone.pid) and `ledger standalone stop`.

The running command writes its pid once its bookies serve and removes the file when it ends.
`stop` sends SIGTERM to that pid only (the command then stops its own bookies) and waits; a
detached run is a session of its own (its pid is its process group), so when it does not end
in time `stop` kills that process group and nothing else. A pid that is not running, or that
is no longer a `standalone` command (the pid was reused), is a stale file: it is removed.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from pyspark_ledger.errors import PySparkLedgerError
from pyspark_ledger.protocol.invariants import ensure

PID_FILE_NAME = "standalone.pid"
# The command stops its bookies in parallel, each within LocalBookie's 15 s: this leaves room.
STOP_WAIT_S = 30.0
KILL_WAIT_S = 10.0
POLL_S = 0.1


class StandaloneError(PySparkLedgerError, RuntimeError):
    """`ledger standalone` cannot do it: already running, a bookie exited, nothing to stop, a
    stale pid file, a process that would not end. The shell prints it as one line, exit 1."""


@dataclass(frozen=True, slots=True)
class Running:
    pid: int
    detached: bool  # its own session: its pid is its process group's id


class PidFile:
    def __init__(self, home: Path):
        self.path = home / PID_FILE_NAME

    def read(self) -> Running | None:
        """The recorded process; None when there is no file or it is unreadable (a write cut short)."""
        try:
            d = json.loads(self.path.read_text())
            return Running(int(d["pid"]), bool(d["detached"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def write(self, *, detached: bool) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"pid": os.getpid(), "detached": detached}))
        os.replace(tmp, self.path)  # readers see the whole file or none

    def remove_if_own(self) -> None:
        running = self.read()
        if running is not None and running.pid == os.getpid():
            self.path.unlink(missing_ok=True)


def alive(pid: int) -> bool:
    """Whether pid is a running (not zombie) `standalone` command."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: not ours, whatever it is
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:  # no /proc (not Linux): trust the signal probe
        return True
    state = stat.rsplit(")", 1)[-1].split()[0]
    return state != "Z" and b"standalone" in cmdline


def running_standalone(home: Path) -> int | None:
    """The pid of the `ledger standalone` serving home, or None (the quickstart then starts its own bookies)."""
    running = PidFile(home).read()
    return running.pid if running is not None and alive(running.pid) else None


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)
    return True


def stop_running(home: Path) -> str:
    """Stop the standalone cluster of home; returns what was done."""
    pid_file = PidFile(home)
    running = pid_file.read()
    if running is None:
        raise StandaloneError(f"no standalone cluster is running on {home} (no pid file {pid_file.path})")
    if not alive(running.pid):
        pid_file.path.unlink(missing_ok=True)
        raise StandaloneError(f"no standalone cluster is running on {home}: pid {running.pid} in "
                                  f"{pid_file.path} is not running (stale pid file, removed)")
    ensure(running.pid > 1, f"refusing to signal pid {running.pid}")
    os.kill(running.pid, signal.SIGTERM)
    if _wait_gone(running.pid, STOP_WAIT_S):
        return f"standalone cluster on {home} stopped (pid {running.pid})"
    if not running.detached:
        raise StandaloneError(f"pid {running.pid} did not stop within {STOP_WAIT_S:g} s")
    # Detached: its pid is the id of a process group this command's --detach created.
    os.killpg(running.pid, signal.SIGKILL)
    if not _wait_gone(running.pid, KILL_WAIT_S):
        raise StandaloneError(f"pid {running.pid} did not end even after SIGKILL")
    pid_file.path.unlink(missing_ok=True)
    return f"standalone cluster on {home} killed (pid {running.pid} did not stop within {STOP_WAIT_S:g} s)"
