"""A 3-node NATS JetStream cluster on loopback for the baseline benchmark (bench/nats_baseline.py):
finding nats-server and nats-py, the servers' configs, start, readiness and stop, and the client
helpers the measurement shares."""

from __future__ import annotations

import asyncio
import importlib
import importlib.metadata
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, TracebackType
from typing import IO, Any

log = logging.getLogger(__name__)

SERVER_INSTALL_HINT = "apt-get update && apt-get install -y nats-server"
CLIENT_INSTALL_HINT = "pip install nats-py"
LOOPBACK = "127.0.0.1"
# Debian installs the binary in /usr/sbin, which is not on a non-root user's PATH.
_SERVER_CANDIDATES = ("nats-server", "/usr/sbin/nats-server", "/usr/local/bin/nats-server")


class NatsUnavailable(RuntimeError):
    """nats-server or nats-py is missing; the message says what to install."""


# --------------------------------------------------------------------------- dependencies


def require_nats_py() -> ModuleType:
    """Import nats-py lazily so that importing this module never needs it."""
    try:
        return importlib.import_module("nats")
    except ImportError as exc:
        raise NatsUnavailable(f"the NATS Python client is not installed: run `{CLIENT_INSTALL_HINT}`") from exc


def find_nats_server(binary: str | None = None) -> str:
    """Absolute path of the nats-server executable, or NatsUnavailable."""
    for candidate in (binary,) if binary else _SERVER_CANDIDATES:
        path = shutil.which(candidate)
        if path:
            return path
    raise NatsUnavailable(f"nats-server not found (looked for {binary or _SERVER_CANDIDATES}): run `{SERVER_INSTALL_HINT}`")


def nats_server_version(binary: str) -> str:
    """E.g. '2.9.10', from `nats-server --version` ('nats-server: v2.9.10')."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10, check=True).stdout
    match = re.search(r"v?(\d+\.\d+\.\d+\S*)", out)
    return match.group(1) if match else out.strip()


def nats_py_version() -> str:
    try:
        return importlib.metadata.version("nats-py")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def server_accepts_sync_interval(binary: str) -> bool:
    """Ask the installed server (config test mode, `-t`) whether `jetstream { sync_interval }` exists.

    This is the behavioural check behind the durability text: 2.9.x rejects the field as unknown, so
    its fsync cadence is the compiled-in default, not something a deployment could have changed.
    """
    with tempfile.TemporaryDirectory(prefix="nats-cfgtest-") as tmp:
        conf = Path(tmp) / "t.conf"
        conf.write_text(f'listen: "{LOOPBACK}:-1"\njetstream {{ store_dir: "{tmp}/js", sync_interval: "2m" }}\n')
        proc = subprocess.run([binary, "-t", "-c", str(conf)], capture_output=True, text=True, timeout=10)
    if proc.returncode != 0:
        log.debug("nats-server -t rejected sync_interval: %s", (proc.stderr or proc.stdout).strip())
    return proc.returncode == 0


def durability_description(server_version: str, accepts_sync_interval: bool) -> str:
    """What a JetStream publish ack means on disk for this server, with default settings."""
    ack = "ack once a quorum (2/3) wrote it to its Raft WAL with write(2) (OS page cache), no fsync per message"
    if accepts_sync_interval:
        # 2.10+: `sync_interval` exists; default 2 min; `always` would fsync every write (not used here).
        background = "stream blocks fsync'ed every sync_interval (default 2m, not changed here), Raft WAL every 5m"
    else:
        # Before 2.10 the option does not exist and the file store's compiled-in default applies:
        # on 2.9.10 strace shows the first fsync of a stream's block 120 s after creation.
        background = "stream blocks fsync'ed every 2m (compiled-in; no sync_interval option), Raft WAL every 5m"
    return f"nats-server {server_version}: {ack}; {background}"


# --------------------------------------------------------------------------- cluster


def _free_loopback_ports(count: int) -> list[int]:
    """Ports the kernel says are free now; all sockets are held at once so they are distinct.

    There is a small race until nats-server binds them; a lost race makes that server exit, which
    `NatsCluster.wait_ready` reports with the server's log.
    """
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((LOOPBACK, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass(frozen=True)
class NodeSpec:
    name: str
    client_port: int
    cluster_port: int
    store_dir: Path
    config_path: Path
    log_path: Path

    @property
    def url(self) -> str:
        return f"nats://{LOOPBACK}:{self.client_port}"


def _node_config(node: NodeSpec, peers: list[NodeSpec], cluster_name: str) -> str:
    """nats-server config for one node.

    A config file rather than flags because clustered JetStream needs `server_name` and a named
    `cluster {}` block, and the store dir must be per node. No `http`/`monitor_port`: nothing may
    listen beyond loopback.
    """
    routes = ", ".join(f'"nats-route://{LOOPBACK}:{p.cluster_port}"' for p in peers)
    return (
        f'server_name: "{node.name}"\n'
        f'listen: "{LOOPBACK}:{node.client_port}"\n'
        f'jetstream {{\n  store_dir: "{node.store_dir}"\n}}\n'
        f"cluster {{\n"
        f'  name: "{cluster_name}"\n'
        f'  listen: "{LOOPBACK}:{node.cluster_port}"\n'
        f"  routes: [{routes}]\n"
        f"}}\n"
    )


class NatsCluster:
    """Three (by default) nats-server processes with JetStream, clustered over loopback.

    Use as a context manager: entering starts the servers and waits (bounded) until an R3 file
    stream can be created and written, i.e. there is a meta leader and every node takes part.
    Leaving stops exactly the processes started here (SIGTERM, then SIGKILL) and deletes the temp
    dir holding configs, stores and logs.
    """

    def __init__(
        self,
        size: int = 3,
        *,
        binary: str | None = None,
        base_dir: str | os.PathLike[str] | None = None,
        cluster_name: str = "ledger-baseline",
        start_timeout: float = 30.0,
        stop_timeout: float = 10.0,
    ) -> None:
        if size < 1:
            raise ValueError("size must be >= 1")
        self.size = size
        self.binary = find_nats_server(binary)
        self.base_dir = base_dir
        self.cluster_name = cluster_name
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.nodes: list[NodeSpec] = []
        self._procs: list[subprocess.Popen[bytes]] = []
        self._log_files: list[IO[bytes]] = []
        self._tmp: Path | None = None
        self._server_info: tuple[str, str] | None = None

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    def server_info(self) -> tuple[str, str]:
        """(version, durability text) of this cluster's binary; computed once (runs nats-server twice)."""
        if self._server_info is None:
            version = nats_server_version(self.binary)
            self._server_info = (version, durability_description(version, server_accepts_sync_interval(self.binary)))
        return self._server_info

    def __enter__(self) -> NatsCluster:
        try:
            self.start()
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    # -- lifecycle

    def start(self) -> None:
        if self._procs:
            raise RuntimeError("cluster already started")
        self._tmp = Path(tempfile.mkdtemp(prefix="nats-baseline-", dir=self.base_dir))
        ports = _free_loopback_ports(2 * self.size)
        self.nodes = [
            NodeSpec(
                name=f"n{i}",
                client_port=ports[2 * i],
                cluster_port=ports[2 * i + 1],
                store_dir=self._tmp / f"n{i}" / "store",
                config_path=self._tmp / f"n{i}" / "server.conf",
                log_path=self._tmp / f"n{i}" / "server.log",
            )
            for i in range(self.size)
        ]
        for node in self.nodes:
            node.store_dir.mkdir(parents=True)
            peers = [p for p in self.nodes if p is not node]
            node.config_path.write_text(_node_config(node, peers, self.cluster_name))
            self._spawn(node)
        log.info("started nats-server pids %s on %s", self.pids, self.urls)

    def _spawn(self, node: NodeSpec) -> None:
        out = open(node.log_path, "ab")  # closed in stop()
        self._log_files.append(out)
        proc = subprocess.Popen(
            [self.binary, "-c", str(node.config_path)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        self._procs.append(proc)

    def check_alive(self) -> None:
        """Raise with the log tail if a server we started has exited (bad port, bad config...)."""
        for node, proc in zip(self.nodes, self._procs, strict=True):
            if proc.poll() is not None:
                raise RuntimeError(f"nats-server {node.name} exited with {proc.returncode}; log tail:\n{self.log_tail(node)}")

    def log_tail(self, node: NodeSpec, lines: int = 20) -> str:
        try:
            return "\n".join(node.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError as exc:
            return f"<no log: {exc}>"

    def wait_ready(self) -> None:
        """Block until an R3 file stream can be created and written (bounded by start_timeout)."""
        asyncio.run(self.wait_ready_async())

    async def wait_ready_async(self) -> None:
        nats = require_nats_py()
        deadline = time.monotonic() + self.start_timeout
        probe = f"ready_{uuid.uuid4().hex[:8]}"
        attempts = 0
        last_error: BaseException | None = None
        while (remaining := deadline - time.monotonic()) > 0:
            self.check_alive()
            attempts += 1
            try:
                # Each attempt is cut at the overall deadline, so start_timeout is a real bound.
                await asyncio.wait_for(self._probe_once(nats, probe), timeout=min(5.0, remaining))
                log.info("JetStream cluster ready after %d attempt(s)", attempts)
                return
            except Exception as exc:  # noqa: BLE001 - not listening yet, "JetStream system temporarily unavailable", timeouts
                last_error = exc
                log.debug("cluster not ready yet (attempt %d): %r", attempts, exc)
                await asyncio.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
        self.check_alive()  # a dead server is a better explanation than the timeout
        raise TimeoutError(
            f"JetStream cluster not ready within {self.start_timeout}s after {attempts} attempts; last error: {last_error!r}"
        )

    async def _probe_once(self, nats: ModuleType, probe: str) -> None:
        """Create, write and delete an R{size} file stream: needs a meta leader, all JetStream peers and a
        stream leader - exactly what a benchmark run needs."""
        nc = await _connect(nats, self.urls, timeout=2.0)
        try:
            js = nc.jetstream(timeout=2.0)
            await js.add_stream(name=probe, subjects=[probe], num_replicas=self.size, storage=_file_storage())
            await js.publish(probe, b"ready", timeout=2.0)
            await js.delete_stream(probe)
        finally:
            await _close(nc)

    def stop(self) -> None:
        """SIGTERM our servers, SIGKILL stragglers after stop_timeout, remove the temp dir. Idempotent."""
        for proc in self._procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        for proc in self._procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("nats-server pid %d ignored SIGTERM for %.0fs; killing", proc.pid, self.stop_timeout)
                proc.kill()
                try:
                    proc.wait(timeout=5.0)
                except subprocess.TimeoutExpired:
                    log.error("nats-server pid %d did not die after SIGKILL", proc.pid)
        if self._procs:
            log.info("stopped nats-server pids %s", self.pids)
        self._procs = []
        for f in self._log_files:
            f.close()
        self._log_files = []
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


# --------------------------------------------------------------------------- client helpers


async def _connect(nats: ModuleType, urls: list[str], timeout: float) -> Any:
    # No reconnects: a benchmark that silently reconnects would hide a failure in its numbers.
    return await nats.connect(
        servers=urls,
        connect_timeout=timeout,
        allow_reconnect=False,
        max_reconnect_attempts=0,
        error_cb=_log_client_error,
    )


def _jetstream(nc: Any, inflight: int) -> Any:
    """JetStream context whose publish_async semaphore allows `inflight` unacked publishes.

    Older clients without publish_async do not take the argument; they get the gather() fallback,
    which bounds in-flight publishes itself.
    """
    try:
        return nc.jetstream(timeout=10.0, publish_async_max_pending=inflight)
    except TypeError:
        return nc.jetstream(timeout=10.0)


def _file_storage() -> Any:
    """nats.js.api.StorageType.FILE (looked up lazily, like the rest of nats-py)."""
    return importlib.import_module("nats.js.api").StorageType.FILE


async def _log_client_error(exc: Exception) -> None:
    log.debug("nats client error: %r", exc)


async def _close(nc: Any) -> None:
    try:
        await asyncio.wait_for(nc.close(), timeout=5.0)
    except Exception as exc:  # noqa: BLE001 - closing is best effort; the servers are torn down anyway
        log.debug("closing nats connection: %r", exc)
