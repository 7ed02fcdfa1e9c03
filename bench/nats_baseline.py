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
import sys
import time
import uuid
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# The cluster lives next to this file; bench/ is not a package, so make it importable either way.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from nats_cluster import (  # noqa: E402,F401 - re-exported: client_bench imports them from here
    CLIENT_INSTALL_HINT,
    LOOPBACK,
    SERVER_INSTALL_HINT,
    NatsCluster,
    NatsUnavailable,
    NodeSpec,
    _close,
    _connect,
    _file_storage,
    _jetstream,
    _log_client_error,
    durability_description,
    find_nats_server,
    nats_py_version,
    nats_server_version,
    require_nats_py,
    server_accepts_sync_interval,
)


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
