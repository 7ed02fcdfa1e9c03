"""Faults on real processes, for the fault suite (tests/faults) and the takeover benchmark.

Every helper acts only on what the caller owns: a process it started (a `subprocess.Popen`,
so the pid is one the test spawned), a proxy it runs, a ZooKeeper session whose id it was
given, a data dir of a bookie it stopped, a file system it mounted. Nothing here looks
processes up by name.

- `kill9`, `pause`, `resume`, `paused`: SIGKILL / SIGSTOP / SIGCONT by pid.
- `TcpProxy` (faults_proxy): a 127.0.0.1 proxy between clients and a bookie that passes,
  blackholes, pauses or drops traffic (a partition) and heals.
- `expire_zk_session`: end a client's ZooKeeper session from outside.
- `corrupt_entry_logs`: flip bytes of entries in a stopped bookie's entry log files.
- `SmallFilesystem`: a small tmpfs the test mounts as a bookie's data dir and fills up.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from pyspark_ledger.errors import PySparkLedgerError
from pyspark_ledger.testing.faults_proxy import ProxyMode, TcpProxy

__all__ = [
    "FaultUnavailable", "ProxyMode", "SmallFilesystem", "TcpProxy", "corrupt_entry_logs", "expire_zk_session",
    "kill9", "pause", "paused", "resume",
]

log = logging.getLogger(__name__)

WAIT_EXIT_S = 15.0
# bookie/storage/engine.py ENTRIES_DIR and entry_log.py's <id:016x>.log (the client may not import bookie internals)
ENTRIES_DIR = "entries"
ENTRY_LOG_NAME_DIGITS = 16


class FaultUnavailable(PySparkLedgerError, RuntimeError):
    """This machine cannot inject the fault (e.g. no permission to mount): tests skip with the reason."""


# ---- processes -------------------------------------------------------------------------------------


def _live_pid(proc: subprocess.Popen[bytes] | subprocess.Popen[str]) -> int:
    """The pid of a process the caller started, refusing one that already exited (its pid may be reused)."""
    if proc.poll() is not None:
        raise ProcessLookupError(f"process {proc.pid} already exited with {proc.returncode}")
    return proc.pid


def kill9(proc: subprocess.Popen[bytes] | subprocess.Popen[str]) -> int:
    """SIGKILL a process the caller started and reap it; returns its exit code (-9)."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    return proc.wait(timeout=WAIT_EXIT_S)


def pause(proc: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    """SIGSTOP: the process keeps its sockets and memory but runs no instruction until `resume`."""
    os.kill(_live_pid(proc), signal.SIGSTOP)


def resume(proc: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGCONT)


@contextlib.contextmanager
def paused(proc: subprocess.Popen[bytes] | subprocess.Popen[str], seconds: float | None = None) -> Iterator[None]:
    """SIGSTOP for the block (and at least `seconds`), SIGCONT always: a failing test never
    leaves a stopped process behind."""
    started = time.monotonic()
    pause(proc)
    try:
        yield
        if seconds is not None:
            time.sleep(max(0.0, seconds - (time.monotonic() - started)))
    finally:
        resume(proc)


# ---- ZooKeeper ---------------------------------------------------------------------------------------


def expire_zk_session(hosts: str, session_id: int, password: bytes, timeout_s: float = 10.0) -> None:
    """End the ZooKeeper session (session_id, password) as the server does when it expires: a
    second client joins the session with its id and password, then closes it. The owner sees
    the session LOST on its next contact with the server. The owner (a child process) reports
    its id and password; ZooKeeperStore.kazoo_client.client_id has them."""
    from pyspark_ledger.testing.zookeeper_server import expire_session

    expire_session(hosts, (session_id, password), timeout_s=timeout_s)


# ---- a corrupted replica -----------------------------------------------------------------------------


def entry_log_files(data_dir: Path) -> list[Path]:
    """The entry log files of a bookie's data dir: <data dir>/entries/<id:016x>.log
    (bookie/storage/engine.py ENTRIES_DIR, entry_log.py). The journal's files have the same
    form of name in journal/ and are left alone: a replica is corrupted where it is read from."""
    out = []
    for p in sorted((Path(data_dir) / ENTRIES_DIR).glob("*.log")):
        stem = p.stem
        if len(stem) == ENTRY_LOG_NAME_DIGITS and all(c in "0123456789abcdef" for c in stem):
            out.append(p)
    return out


def corrupt_entry_logs(data_dir: Path, marker: bytes, *, every: int = 1, flip_offset: int = 0) -> int:
    """Flip one byte in every `every`-th entry found in a STOPPED bookie's entry logs, and
    return how many were flipped. An entry is found by `marker`, a byte string each payload
    of the workload starts with (the on-disk layout, bookie/storage/records.py, puts the
    payload after a fixed header with its crc32c, so the bookie's own crc check and the
    client's digest both see the change). `flip_offset` counts from the end of the marker."""
    if every < 1:
        raise ValueError("every must be >= 1")
    flipped = seen = 0
    for path in entry_log_files(data_dir):
        data = bytearray(path.read_bytes())
        pos = data.find(marker)
        changed = False
        while pos >= 0:
            if seen % every == 0:
                at = pos + len(marker) + flip_offset
                if at < len(data):
                    data[at] ^= 0xFF
                    flipped += 1
                    changed = True
            seen += 1
            pos = data.find(marker, pos + len(marker))
        if changed:
            path.write_bytes(bytes(data))
            log.warning("corrupted entries in an entry log path=%s flipped_so_far=%d", path, flipped)
    return flipped


# ---- a full disk -------------------------------------------------------------------------------------


class SmallFilesystem:
    """A tmpfs of `size_bytes` mounted at `mount_point` (needs root and mount(2): the machine
    this suite runs on allows both; elsewhere FaultUnavailable says why). `fill(leave_bytes)`
    writes a ballast file until only `leave_bytes` are free, `drain()` removes it, `unmount()`
    undoes the mount. A real file system with a real size: a bookie on it sees the same
    statvfs figures and ENOSPC a full disk gives."""

    BALLAST = "ballast.bin"
    CHUNK = 2**20

    def __init__(self, mount_point: Path, size_bytes: int):
        self.mount_point = Path(mount_point)
        self.size_bytes = size_bytes
        self.mounted = False

    def mount(self) -> SmallFilesystem:
        if os.geteuid() != 0:
            raise FaultUnavailable(f"mounting a small file system needs root (this process is uid {os.geteuid()})")
        self.mount_point.mkdir(parents=True, exist_ok=True)
        res = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.size_bytes},mode=0755", "tmpfs", str(self.mount_point)],
            capture_output=True, text=True, timeout=30,
        )
        if res.returncode != 0:
            raise FaultUnavailable(f"mount -t tmpfs failed: {res.stderr.strip() or res.returncode}")
        self.mounted = True
        return self

    def free_bytes(self) -> int:
        st = os.statvfs(self.mount_point)
        return st.f_bavail * st.f_frsize

    def used_fraction(self) -> float:
        st = os.statvfs(self.mount_point)
        total = st.f_blocks * st.f_frsize
        return 1.0 - (st.f_bavail * st.f_frsize) / total if total else 1.0

    def fill(self, leave_bytes: int = 0) -> int:
        """Write ballast until at most `leave_bytes` are free (bounded by the file system's size);
        returns the ballast's size."""
        path = self.mount_point / self.BALLAST
        written = path.stat().st_size if path.exists() else 0
        chunk = b"\0" * self.CHUNK
        with open(path, "ab") as fh:
            for _ in range(self.size_bytes // self.CHUNK + 1):
                room = self.free_bytes() - leave_bytes
                if room <= 0:
                    break
                try:
                    fh.write(chunk[: min(self.CHUNK, room)])
                    fh.flush()
                except OSError:  # ENOSPC: as full as it gets
                    break
                written += min(self.CHUNK, room)
        return written

    def drain(self) -> None:
        (self.mount_point / self.BALLAST).unlink(missing_ok=True)

    def unmount(self) -> None:
        if not self.mounted:
            return
        res = subprocess.run(["umount", str(self.mount_point)], capture_output=True, text=True, timeout=30)
        if res.returncode != 0:
            # A process still holds a file there (a bookie not yet reaped): detach lazily.
            subprocess.run(["umount", "-l", str(self.mount_point)], capture_output=True, timeout=30)
        self.mounted = False

    def __enter__(self) -> SmallFilesystem:
        return self.mount()

    def __exit__(self, *exc: object) -> None:
        self.unmount()
