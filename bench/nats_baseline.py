"""Baseline: publish throughput and latency of a 3-node NATS JetStream cluster on loopback.

Our own client benchmark imports this module and prints NATS's numbers next to ours, so the
comparison is "same machine, same loopback, same payload sizes, R3 replication, file storage".

Requirements (neither is a dependency of pyspark-ledger itself):

    apt-get update && apt-get install -y nats-server    # Debian package, provides /usr/sbin/nats-server
    pip install nats-py                                  # asyncio client, imported lazily

This module imports without either; the functions that need them raise `NatsUnavailable` with the
install command. Every server binds 127.0.0.1 only (client and cluster ports; no monitoring port).

Library use:

    from nats_baseline import NatsCluster, measure   # bench/ on sys.path (python bench/x.py);
                                                      # or `from bench.nats_baseline import ...` from the repo root
    with NatsCluster() as cluster:
        result = measure(1024, 50_000, inflight=1000, cluster=cluster)
    # or, one self-contained run (starts and stops its own cluster):
    result = measure(1024, 50_000)

Script use:

    python bench/nats_baseline.py [--messages 50000] [--inflight 1000] [--latency-messages 2000] [-v]

Durability of what is measured (see `durability_description`; checked on nats-server 2.9.10 with
strace): JetStream acknowledges a publish once the stream's Raft group has committed it, i.e. a
quorum (2 of 3) has appended it to its Raft WAL with write(2) - into the OS page cache, NOT
fsync'ed - and the leader has applied it to its message block (write(2) again). No fsync happens on
the publish path. fsync only happens in the background: the stream's message blocks every
`sync_interval`, and each stream's Raft WAL every 5 min. On 2.9.10 `sync_interval` is not a config
option (the server rejects it as an unknown field) and the compiled-in default is 2 min (first
fsync of the stream block observed exactly 120 s after stream creation); since 2.10 it is
configurable (`jetstream { sync_interval: 2m | always }`), default still 2 min. So acknowledged
messages survive a nats-server process crash, but a power/kernel failure of a quorum can lose up
to ~2 min of them. We keep the default, because the point is NATS as deployed out of the box.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.metadata
import logging
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
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
        out = open(node.log_path, "ab")  # noqa: SIM115 - closed in stop()
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
            except Exception as exc:  # not listening yet, "JetStream system temporarily unavailable", timeouts
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
    except Exception as exc:  # closing is best effort; the servers are torn down anyway
        log.debug("closing nats connection: %r", exc)


def _percentile(sorted_values: list[float], pct: float) -> float:
    """Nearest-rank percentile of an already sorted, non-empty list."""
    rank = max(1, math.ceil(pct / 100.0 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


async def _publish_async_bounded(js: Any, subject: str, payload: bytes, messages: int, inflight: int, timeout: float) -> int:
    """Pipelined publish with nats-py's publish_async; the context's semaphore (publish_async_max_pending
    = `inflight`, set when the context was made) bounds the in-flight count.

    Returns the number of failed acks. Raises TimeoutError if everything is not acked in time.
    """
    deadline = time.monotonic() + timeout
    failures = 0
    stalled = importlib.import_module("nats.js.errors").TooManyStalledMsgsError

    def on_done(fut: asyncio.Future[Any]) -> None:
        nonlocal failures
        if fut.cancelled() or fut.exception() is not None:
            failures += 1

    pending: list[asyncio.Future[Any]] = []
    for _ in range(messages):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        # wait_stall bounds how long we block when `inflight` acks are outstanding.
        try:
            fut = await js.publish_async(subject, payload, wait_stall=remaining)
        except stalled as exc:
            raise TimeoutError(f"{inflight} publishes stayed unacknowledged until the {timeout}s deadline") from exc
        fut.add_done_callback(on_done)
        pending.append(fut)
    try:
        await asyncio.wait_for(js.publish_async_completed(), timeout=max(0.001, deadline - time.monotonic()))
    except TimeoutError:  # asyncio.TimeoutError is the builtin since 3.11
        left = sum(1 for f in pending if not f.done())
        for f in pending:
            f.cancel()
        raise TimeoutError(f"{left} publishes still unacknowledged after {timeout}s") from None
    if len(pending) < messages:
        raise TimeoutError(f"only {len(pending)}/{messages} messages were sent within {timeout}s")
    return failures


async def _publish_gather_windows(js: Any, subject: str, payload: bytes, messages: int, inflight: int, timeout: float) -> int:
    """Fallback for nats-py without publish_async: gather `inflight` js.publish calls at a time."""
    deadline = time.monotonic() + timeout
    failures = 0
    sent = 0
    while sent < messages:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"only {sent}/{messages} messages acknowledged within {timeout}s")
        window = min(inflight, messages - sent)
        results = await asyncio.gather(
            *(js.publish(subject, payload, timeout=remaining) for _ in range(window)), return_exceptions=True
        )
        failures += sum(1 for r in results if isinstance(r, BaseException))
        sent += window
    return failures


async def _latencies(js: Any, subject: str, payload: bytes, count: int, budget: float) -> list[float]:
    """One publish at a time, awaiting each ack; stops at `count` samples or after `budget` seconds."""
    samples: list[float] = []
    deadline = time.monotonic() + budget
    while len(samples) < count and time.monotonic() < deadline:
        t0 = time.perf_counter()
        await js.publish(subject, payload, timeout=max(0.5, deadline - time.monotonic()))
        samples.append(time.perf_counter() - t0)
    return samples


# --------------------------------------------------------------------------- measurement


async def measure_async(
    payload_bytes: int,
    messages: int,
    *,
    inflight: int = 1000,
    cluster: NatsCluster | None = None,
    latency_messages: int = 2000,
    latency_budget: float = 15.0,
    timeout: float = 60.0,
) -> dict[str, Any]:
    """`measure` for callers already inside an event loop. `cluster` must be given (and running)."""
    if cluster is None:
        raise ValueError("measure_async needs a running NatsCluster; use measure() to start one")
    if payload_bytes < 0 or messages < 1 or inflight < 1:
        raise ValueError("need payload_bytes >= 0, messages >= 1, inflight >= 1")
    nats = require_nats_py()
    server_version, durability = cluster.server_info()

    stream = f"bench_{payload_bytes}_{uuid.uuid4().hex[:8]}"
    payload = os.urandom(payload_bytes)  # incompressible, like the payloads of our own benchmark
    nc = await _connect(nats, cluster.urls, timeout=5.0)
    try:
        js = _jetstream(nc, inflight)
        await js.add_stream(name=stream, subjects=[stream], num_replicas=cluster.size, storage=_file_storage())
        # Warm-up: first messages pay for stream-leader lookups and buffer growth; not counted.
        await _latencies(js, stream, payload, min(200, messages), budget=10.0)

        use_async = hasattr(js, "publish_async")
        t0 = time.perf_counter()
        if use_async:
            failures = await _publish_async_bounded(js, stream, payload, messages, inflight, timeout)
        else:
            failures = await _publish_gather_windows(js, stream, payload, messages, inflight, timeout)
        elapsed = time.perf_counter() - t0
        if failures:
            raise RuntimeError(f"{failures}/{messages} publishes were not acknowledged")

        lat = sorted(await _latencies(js, stream, payload, latency_messages, latency_budget))
        await js.delete_stream(stream)  # frees the disk space; the cluster may be reused
    finally:
        await _close(nc)

    return {
        "system": "nats-jetstream",
        "payload_bytes": payload_bytes,
        "messages": messages,
        "inflight": inflight,
        "publish_mode": "publish_async" if use_async else "gather(js.publish)",
        "replicas": cluster.size,
        "storage": "file",
        "seconds": elapsed,
        "msgs_per_s": messages / elapsed,
        "mb_per_s": messages * payload_bytes / elapsed / 1e6,  # MB = 10^6 bytes, as in bookie_bench
        "latency_samples": len(lat),
        "p50_ms": _percentile(lat, 50) * 1000 if lat else float("nan"),
        "p99_ms": _percentile(lat, 99) * 1000 if lat else float("nan"),
        "durability": durability,
        "nats_server_version": server_version,
        "nats_py_version": nats_py_version(),
    }


def measure(
    payload_bytes: int,
    messages: int,
    *,
    inflight: int = 1000,
    cluster: NatsCluster | None = None,
    latency_messages: int = 2000,
    latency_budget: float = 15.0,
    timeout: float = 60.0,
) -> dict[str, Any]:
    """Publish `messages` messages of `payload_bytes` to a new R3 file stream; return throughput and latency.

    Throughput: pipelined async publishes with at most `inflight` unacknowledged, timed until the
    last ack (bounded by `timeout` s). Latency: then up to `latency_messages` publishes one at a
    time (bounded by `latency_budget` s), p50/p99 in ms. If `cluster` is None a 3-node cluster is
    started and stopped around the run.

    Keys: msgs_per_s, mb_per_s, p50_ms, p99_ms, durability, plus run parameters and versions.
    """
    kwargs: dict[str, Any] = dict(
        inflight=inflight, latency_messages=latency_messages, latency_budget=latency_budget, timeout=timeout
    )
    if cluster is not None:
        return asyncio.run(measure_async(payload_bytes, messages, cluster=cluster, **kwargs))
    with NatsCluster() as own:
        return asyncio.run(measure_async(payload_bytes, messages, cluster=own, **kwargs))


# --------------------------------------------------------------------------- script

DEFAULT_PAYLOADS = (1024, 100)


def format_table(results: list[dict[str, Any]]) -> str:
    header = f"{'payload':>8} {'msgs/s':>10} {'MB/s':>8} {'p50 ms':>8} {'p99 ms':>8}  durability"
    rows = [
        f"{r['payload_bytes']:>7}B {r['msgs_per_s']:>10,.0f} {r['mb_per_s']:>8.2f} "
        f"{r['p50_ms']:>8.3f} {r['p99_ms']:>8.3f}  {r['durability']}"
        for r in results
    ]
    return "\n".join([header, *rows])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000, help="messages per payload size for throughput")
    parser.add_argument("--inflight", type=int, default=1000, help="max unacknowledged async publishes")
    parser.add_argument("--latency-messages", type=int, default=2000, help="one-at-a-time publishes for p50/p99")
    parser.add_argument("--payloads", default=",".join(map(str, DEFAULT_PAYLOADS)), help="comma-separated payload sizes in bytes")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(asctime)s %(name)s %(message)s")

    try:
        with NatsCluster() as cluster:
            results = [
                measure(
                    size,
                    args.messages,
                    inflight=args.inflight,
                    cluster=cluster,
                    latency_messages=args.latency_messages,
                )
                for size in (int(p) for p in args.payloads.split(","))
            ]
    except NatsUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    first = results[0]
    print(
        f"NATS JetStream baseline: {cluster.size} nodes on loopback, R{first['replicas']} {first['storage']} stream, "
        f"{first['publish_mode']} with {first['inflight']} in flight, {first['messages']} msgs/size, "
        f"latency over {first['latency_samples']} sequential publishes; "
        f"nats-server {first['nats_server_version']}, nats-py {first['nats_py_version']}"
    )
    print(format_table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
