"""The floor under the client's add latency: bare transports shaped like an E3/W3/A2 add.

Three echo servers (separate processes, like three bookies), each answering a 1 KiB stream
message after one write + fdatasync of it to a file, the way a bookie's journal does; one client
sends every message to all three and waits for two answers, one message at a time (the
client benchmark's latency workload with none of the ledger logic). Run with gRPC's default
EventEngine, with the iomgr poller that `bookie.grpc_runtime` selects, and over plain TCP with a
length prefix (the add transport of docs/add-transport.md), alternating, and print median
latency and CPU per add, so the transport's share of bench/client_bench.py's latency, and what
each choice buys, can be read off one table.

    python bench/grpc_transport_bench.py [--adds 2000] [--rounds 3] [--size 1024]
"""

from __future__ import annotations

import argparse
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures

SERVICE = "bench.Echo"
METHOD = f"/{SERVICE}/Stream"
SETTINGS = {
    "servers default (EventEngine)": {"PYSPARK_LEDGER_GRPC_TUNING": "0", "GRPC_EXPERIMENTS": ""},
    "servers tuned (iomgr)": {"PYSPARK_LEDGER_GRPC_TUNING": "1", "GRPC_EXPERIMENTS": ""},
    # The add transport's shape (docs/add-transport.md): no gRPC at all.
    "plain TCP, no gRPC": {"BENCH_TRANSPORT": "tcp"},
}


def _identity(b: bytes) -> bytes:
    return b


def serve(port: int, journal: str) -> None:
    import grpc

    fd = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def stream(requests: Iterator[bytes], context: object) -> Iterator[bytes]:
        for message in requests:
            os.write(fd, message)
            os.fdatasync(fd)
            yield message[:16]

    handler = grpc.method_handlers_generic_handler(
        SERVICE, {"Stream": grpc.stream_stream_rpc_method_handler(stream, _identity, _identity)})
    server = grpc.server(futures.ThreadPoolExecutor(4))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    server.wait_for_termination()


def serve_tcp(port: int, journal: str) -> None:
    """The same echo over plain TCP with a 4-byte length prefix (the add transport's framing)."""
    import socket
    import struct

    fd = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    listener = socket.create_server(("127.0.0.1", port))

    def handle(conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        stream = conn.makefile("rb")
        while len(header := stream.read(4)) == 4:
            message = stream.read(struct.unpack(">I", header)[0])
            os.write(fd, message)
            os.fdatasync(fd)
            conn.sendall(struct.pack(">I", 16) + message[:16])

    while True:
        conn, _ = listener.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _time_round_trips(send_to_all: Callable[[], None], acked: threading.Condition, count: list[int],
                      server_pids: list[int], adds: int) -> tuple[float, float, float]:
    """Median and p99 latency (ms) of `adds` sequential 2-of-3 round trips, and CPU us per add
    (client + servers); `count[0]` is raised under `acked` by the receivers, one per answer."""

    def one() -> float:
        started = time.perf_counter()
        with acked:
            count[0] = 0
        send_to_all()
        with acked:
            if not acked.wait_for(lambda: count[0] >= 2, timeout=10):
                raise TimeoutError("echo servers stopped answering")
            elapsed = time.perf_counter() - started
            acked.wait_for(lambda: count[0] >= 3, timeout=10)  # start the next one from quiet
        return elapsed

    for _ in range(min(200, adds)):
        one()
    cpu0 = time.process_time() + sum(_cpu_s(p) for p in server_pids)
    samples = sorted(one() for _ in range(adds))
    cpu = time.process_time() + sum(_cpu_s(p) for p in server_pids) - cpu0
    return statistics.median(samples) * 1e3, samples[int(len(samples) * 0.99) - 1] * 1e3, cpu / adds * 1e6


def measure(ports: list[int], server_pids: list[int], adds: int, size: int) -> tuple[float, float, float]:
    """Median and p99 latency (ms) of `adds` sequential 2-of-3 round trips, and CPU us per add
    (client + servers)."""
    import grpc

    acked = threading.Condition()
    count = [0]
    outs: list[queue.Queue[bytes | None]] = []
    channels = []
    for port in ports:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        channels.append(channel)
        out: queue.Queue[bytes | None] = queue.Queue()
        outs.append(out)

        def requests(out: queue.Queue[bytes | None] = out) -> Iterator[bytes]:
            while (item := out.get()) is not None:
                yield item

        call = channel.stream_stream(METHOD, request_serializer=None, response_deserializer=None)(requests())

        def receive(call: object = call) -> None:
            try:
                for _ in call:
                    with acked:
                        count[0] += 1
                        acked.notify_all()
            except grpc.RpcError:
                pass

        threading.Thread(target=receive, daemon=True).start()
    payload = b"p" * size

    def send_to_all() -> None:
        for out in outs:
            out.put(payload)

    result = _time_round_trips(send_to_all, acked, count, server_pids, adds)
    for out in outs:
        out.put(None)
    for channel in channels:
        channel.close()
    return result


def measure_tcp(ports: list[int], server_pids: list[int], adds: int, size: int) -> tuple[float, float, float]:
    """measure() over plain TCP: the caller sends to all three, a receiver thread per server."""
    import socket
    import struct

    acked = threading.Condition()
    count = [0]
    socks = [socket.create_connection(("127.0.0.1", p), timeout=10) for p in ports]

    def receive(sock: socket.socket) -> None:
        stream = sock.makefile("rb")
        while len(header := stream.read(4)) == 4:
            stream.read(struct.unpack(">I", header)[0])
            with acked:
                count[0] += 1
                acked.notify_all()

    for sock in socks:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(None)
        threading.Thread(target=receive, args=(sock,), daemon=True).start()
    message = struct.pack(">I", size) + b"p" * size

    def send_to_all() -> None:
        for sock in socks:
            sock.sendall(message)

    result = _time_round_trips(send_to_all, acked, count, server_pids, adds)
    for sock in socks:
        sock.close()
    return result


def run_setting(env_overrides: dict[str, str], adds: int, size: int) -> tuple[float, float, float]:
    """One measurement in a fresh client process (gRPC reads its settings once per process)."""
    env = {**os.environ, **env_overrides}
    out = subprocess.run([sys.executable, __file__, "--_child", str(adds), str(size)], env=env,
                         capture_output=True, text=True, timeout=600, check=True)
    p50, p99, cpu = out.stdout.split()[-3:]
    return float(p50), float(p99), float(cpu)


def child(adds: int, size: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ports = [_free_port() for _ in range(3)]
        tcp = os.environ.get("BENCH_TRANSPORT") == "tcp"
        servers = [subprocess.Popen([sys.executable, __file__, "--_serve_tcp" if tcp else "--_serve", str(p),
                                     os.path.join(tmp, f"j{p}")]) for p in ports]
        try:
            time.sleep(1.5)
            p50, p99, cpu = (measure_tcp if tcp else measure)(ports, [s.pid for s in servers], adds, size)
        finally:
            for s in servers:
                s.kill()
                s.wait(timeout=10)
    print(f"{p50:.4f} {p99:.4f} {cpu:.1f}")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--_serve":
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        import bookie.grpc_runtime as tuning

        tuning.apply_grpc_tuning()  # as the bookie does, unless PYSPARK_LEDGER_GRPC_TUNING=0
        serve(int(sys.argv[2]), sys.argv[3])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--_serve_tcp":
        serve_tcp(int(sys.argv[2]), sys.argv[3])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--_child":
        child(int(sys.argv[2]), int(sys.argv[3]))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--adds", type=int, default=2_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=1024)
    args = ap.parse_args()
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in SETTINGS}
    for _ in range(args.rounds):  # alternate, so drift on a shared machine hits both alike
        for name, env in SETTINGS.items():
            results[name].append(run_setting(env, args.adds, args.size))
    print(f"\nEcho, 3 servers (write + fdatasync each), wait for 2 of 3, {args.size} B, "
          f"{args.adds} sequential adds x {args.rounds} rounds (medians of rounds)")
    print(f"{'transport':<30} | {'p50 ms':>7} | {'p99 ms':>7} | {'CPU us/add (client + 3 servers)':>32}")
    print("-" * 86)
    for name, rows in results.items():
        p50 = statistics.median(r[0] for r in rows)
        p99 = statistics.median(r[1] for r in rows)
        cpu = statistics.median(r[2] for r in rows)
        print(f"{name:<30} | {p50:7.3f} | {p99:7.3f} | {cpu:32.0f}")


if __name__ == "__main__":
    main()
