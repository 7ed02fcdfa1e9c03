"""The fault suite's moving parts: writer processes whose acknowledgements the test records, a
tailing reader, a bounded read-back of a whole log, and a cluster of real bookies each behind
a proxy the test owns (and, for full-disk rounds, each on a small file system of its own)."""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.log import Position
from pyspark_ledger.testing.fault_check import FaultCounters, Place, format_table
from pyspark_ledger.testing.faults import ProxyMode, SmallFilesystem, TcpProxy
from pyspark_ledger.testing.local_cluster import LocalBookie, LocalCluster
from pyspark_ledger.testing.process_lines import ProcessLines
from pyspark_ledger.testing.zookeeper_server import free_port

REPO = Path(__file__).resolve().parents[2]
# A writer that prints nothing for this long is stuck, not slow: every wait for a writer's progress
# or exit is bounded by its silence, never by a wall clock (the machine may be shared and loaded).
WAIT_S = 180.0
TOTAL_WAIT_S = 3600.0  # the backstop of any one wait
POLL_S = 1.0
READ_BOUND_S = 120.0
TAIL_IDLE_S = 1.0
# Rounds of each fault: CI runs the default; LEDGER_FAULT_ROUNDS=N runs N (docs/faults.md).
ROUNDS = max(1, int(os.environ.get("LEDGER_FAULT_ROUNDS", "2")))


class WriterProcess:
    """tests/faults/fault_writer_proc.py in a child process; its lines are read by a thread
    (the child never blocks on its pipe)."""

    def __init__(self, uri: str, log_name: str, writer: str, *, total: int, size: int = 1024, window: int = 16,
                 add_timeout_s: float = 2.0, pause_s: float = 0.005):
        self.writer = writer
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.faults.fault_writer_proc", uri, log_name, writer, str(total), str(size),
             str(window), str(add_timeout_s), str(pause_s)],
            cwd=REPO, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, stderr=self.stderr, text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        self.out = ProcessLines(self.proc)
        self.lines, self.cond = self.out.lines, self.out.cond

    def _count(self, prefix: str) -> int:
        return self.out.count(prefix)

    def acked(self) -> list[int]:
        return self.out.acked()

    def session(self) -> tuple[int, bytes]:
        self.wait_for(lambda: self._count("SESSION "))
        line = next(x for x in self.lines if x.startswith("SESSION "))
        _, sid, pw = line.split()
        return int(sid), bytes.fromhex(pw)

    def wait_for(self, predicate: Callable[[], object], bound_s: float = WAIT_S) -> bool:
        """Wait until predicate() or the writer's end; False if the writer printed nothing new
        for `bound_s` before either."""
        started = last_change = time.monotonic()
        seen = len(self.lines)
        while time.monotonic() - started < TOTAL_WAIT_S:
            if self.out.wait_for(lambda: bool(predicate()), POLL_S) or self.out.ended:
                return True
            now = time.monotonic()
            if len(self.lines) != seen:
                seen, last_change = len(self.lines), now
            elif now - last_change > bound_s:
                return False
        return False

    def wait_acks(self, n: int) -> None:
        if not self.wait_for(lambda: self._count("ACK ") >= n):
            raise AssertionError(f"writer {self.writer}: fewer than {n} acks, nothing new for {WAIT_S:g} s: {self.lines[-3:]}")
        if self._count("ACK ") < n:
            raise AssertionError(f"writer {self.writer} ended before {n} acks: {self.outcome()}\n{self.stderr_tail()}")

    def wait_exit(self, bound_s: float = WAIT_S) -> bool:
        """True if the writer exited; False (and it is killed: a stalled writer) if it printed
        nothing new for `bound_s` before that."""
        started = last_change = time.monotonic()
        seen = len(self.lines)
        while time.monotonic() - started < TOTAL_WAIT_S:
            try:
                self.proc.wait(timeout=POLL_S)
            except subprocess.TimeoutExpired:
                now = time.monotonic()
                if len(self.lines) != seen:
                    seen, last_change = len(self.lines), now  # still appending: slow, not stalled
                elif now - last_change > bound_s:
                    break
                continue
            self.out.thread.join(WAIT_S)
            return True
        self.proc.kill()
        self.proc.wait(timeout=WAIT_S)
        return False

    def stderr_tail(self, limit: int = 3000) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")[-limit:]

    def outcome(self) -> str:
        """DONE, STOPPED <error>, or the last line."""
        with self.cond:
            ends = [x for x in self.lines if x.startswith(("DONE", "STOPPED"))]
            return ends[-1] if ends else (self.lines[-1] if self.lines else "")

    def stalls(self) -> list[str]:
        with self.cond:
            return [x for x in self.lines if x.startswith("STALL")]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=WAIT_S)


class LogTailer:
    """A tailing reader on its own client; records every message it is given as ((ledger seq,
    entry id, index), payload)."""

    def __init__(self, uri: str, log_name: str):
        self.client = LedgerClient(uri)
        self.reader = self.client.open_log_reader(log_name)
        self.entries: list[tuple[Place, bytes]] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        """Tail in stretches of at most TAIL_IDLE_S without news, each resuming after the last
        entry seen, until stopped: a writer paused for seconds does not end the tail."""
        start: Position | None = None
        try:
            while not self._stop.is_set():
                for e in self.reader.tail(start, idle_timeout_s=TAIL_IDLE_S):
                    self.entries.append(((e.position.seq, e.position.entry_id, e.position.index), e.payload))
                    start = Position(e.position.seq, e.position.entry_id, e.position.ledger_id, e.position.index + 1)
        except LedgerError as exc:  # a reader error is not a safety violation, but reported
            self.error = exc

    def stop(self) -> bool:
        """Stop; False if the tail did not end within its bound (a stalled reader)."""
        self._stop.set()
        self._thread.join(WAIT_S)
        ended = not self._thread.is_alive()
        if ended:
            self.reader.close()
            self.client.close()
        return ended


def read_log(uri: str, log_name: str) -> list[tuple[Place, bytes]] | None:
    """Every readable entry of the log, in order, with a fresh client; None if the read did not
    end within READ_BOUND_S (stalled)."""
    def read() -> list[tuple[Place, bytes]]:
        with LedgerClient(uri) as client, client.open_log_reader(log_name) as reader:
            return [((e.position.seq, e.position.entry_id, e.position.index), e.payload) for e in reader.read()]

    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        return pool.submit(read).result(timeout=READ_BOUND_S)
    except concurrent.futures.TimeoutError:
        return None
    finally:
        pool.shutdown(wait=False)


@dataclass
class ProxiedBookie:
    bookie: LocalBookie
    grpc_proxy: TcpProxy
    add_proxy: TcpProxy
    fs: SmallFilesystem | None = None

    @property
    def bookie_id(self) -> str:
        return self.bookie.bookie_id

    def partition(self, mode: ProxyMode) -> None:
        self.grpc_proxy.set_mode(mode)
        self.add_proxy.set_mode(mode)

    def heal(self) -> None:
        self.grpc_proxy.heal()
        self.add_proxy.heal()


@dataclass
class FaultCluster:
    """Real bookies on one metadata store, each advertising proxies the test owns."""

    metadata_uri: str
    cluster: LocalCluster
    bookies: list[ProxiedBookie] = field(default_factory=list)
    _client: LedgerClient | None = None
    disk_mode: str = ""  # small_fs_cluster's: "threshold" or "enospc"

    @property
    def client(self) -> LedgerClient:
        """A client kept open for metadata questions (a new ZooKeeper session costs ~0.5 s)."""
        if self._client is None:
            self._client = LedgerClient(self.metadata_uri)
        return self._client

    def by_id(self, bookie_id: str) -> ProxiedBookie:
        return next(b for b in self.bookies if b.bookie_id == bookie_id)

    def current_ensemble(self, log_name: str) -> list[str]:
        """The bookies of the last fragment of the log's last ledger (the writer's, now)."""
        lid = self.client.describe_log(log_name).ledgers[-1].ledger_id
        return list(self.client.ledger_metadata(lid).segments[-1].bookies)

    def wait_moved_off(self, log_name: str, bookie_id: str, writer: WriterProcess, bound_s: float = WAIT_S) -> None:
        """Wait until the writer's current fragment no longer names the bookie (an ensemble
        change); fails if the writer ended first or the bound passed."""
        deadline = time.monotonic() + bound_s
        while bookie_id in (ensemble := self.current_ensemble(log_name)):
            if writer.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"no ensemble change away from {bookie_id} ({ensemble}); writer: {writer.outcome()}"
                                     f", {len(writer.acked())} acks")
            time.sleep(0.05)

    def ensure_running(self) -> None:
        for b in self.bookies:
            if not b.bookie.running:
                b.bookie.start()
            b.heal()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        for b in self.bookies:
            b.heal()
        # Graceful stops in parallel (each drains and checkpoints for most of a second).
        stops = [threading.Thread(target=b.bookie.stop, daemon=True) for b in self.bookies]
        for t in stops:
            t.start()
        for t in stops:
            t.join(WAIT_S)
        self.cluster.close()
        for b in self.bookies:
            b.grpc_proxy.close()
            b.add_proxy.close()
            if b.fs is not None:
                b.fs.unmount()


def start_fault_cluster(metadata_uri: str, work_dir: Path, n: int = 4, *, small_fs_bytes: int | None = None,
                        bookie_args: list[str] | None = None) -> FaultCluster:
    """n bookies, each behind a gRPC proxy and an add proxy; with small_fs_bytes, each bookie's
    data dir is a tmpfs of that size (SmallFilesystem: raises FaultUnavailable where it cannot)."""
    cluster = LocalCluster(0, metadata_uri=metadata_uri, work_dir=work_dir)
    fc = FaultCluster(metadata_uri, cluster)
    try:
        for i in range(n):
            data_dir = work_dir / f"bookie-{i}"
            fs = None
            if small_fs_bytes is not None:
                fs = SmallFilesystem(work_dir / f"fs-{i}", small_fs_bytes).mount()
                data_dir = fs.mount_point / "data"
            port, add_port = free_port(), free_port()
            grpc_proxy = TcpProxy(f"127.0.0.1:{port}").start()
            add_proxy = TcpProxy(f"127.0.0.1:{add_port}").start()
            args = ["--add-port", str(add_port), "--advertised-address", grpc_proxy.address,
                    "--advertised-add-address", add_proxy.address, *(bookie_args or [])]
            b = LocalBookie(metadata_uri, data_dir, port=port, extra_args=args, log_path=work_dir / f"bookie-{i}.log")
            cluster.bookies.append(b)
            fc.bookies.append(ProxiedBookie(b, grpc_proxy, add_proxy, fs))
        for pb in fc.bookies:
            pb.bookie.start(wait=False)
        for pb in fc.bookies:
            pb.bookie.wait_serving()
    except BaseException:
        fc.close()
        raise
    return fc


def report(title: str, rows: dict[str, FaultCounters], started: float) -> None:
    print(f"\n== {title} ({time.monotonic() - started:.1f} s, LEDGER_FAULT_ROUNDS={ROUNDS}) ==")
    print(format_table(rows))
