"""Fork-then-exec while gRPC calls are in flight, as pyspark does when it starts its JVM
(subprocess with preexec_fn, so a real fork and not vfork). Run as a script:

    python -m tests.client.fork_exec_probe FORKS {package|grpc-only} [--stop-at-first]

`package` imports pyspark_ledger before grpc, as an application using the client does. Prints
one JSON line: forks tried and failed (a child that exited non-zero, wrote to stderr, or had not
exec'd and exited within CHILD_TIMEOUT_S).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import threading
from concurrent import futures

CHILD_TIMEOUT_S = 5.0
CALLERS = 3  # threads keeping gRPC's poller busy during every fork


def _busy_grpc() -> threading.Event:
    import grpc

    server = grpc.server(futures.ThreadPoolExecutor(4))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    call = grpc.insecure_channel(f"127.0.0.1:{port}").unary_unary("/probe/Nothing")
    stop = threading.Event()

    def keep_calling() -> None:
        while not stop.is_set():
            try:
                call(b"", timeout=0.05)
            except grpc.RpcError:
                pass  # unimplemented: the round trip is the point

    for _ in range(CALLERS):
        threading.Thread(target=keep_calling, daemon=True).start()
    return stop


def _run_child(verdict: list[bool]) -> None:
    try:
        done = subprocess.run(["/bin/true"], preexec_fn=lambda: None, close_fds=True, capture_output=True,
                              timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        verdict.append(True)
        return
    verdict.append(done.returncode != 0 or bool(done.stderr))


def _fork_exec_fails() -> bool | None:
    """True: the child failed; None: it hung before exec, so Popen itself never returned (it
    waits for the exec before any timeout applies)."""
    verdict: list[bool] = []
    waiter = threading.Thread(target=_run_child, args=(verdict,), daemon=True)
    waiter.start()
    waiter.join(CHILD_TIMEOUT_S * 2)
    return verdict[0] if verdict else None


def _kill_own_children() -> None:
    """The hung child is ours (we forked it), but Popen never returned its pid: find it."""
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as f:
            for pid in f.read().split():
                os.kill(int(pid), 9)


def main() -> None:
    forks, mode = int(sys.argv[1]), sys.argv[2]
    stop_at_first = "--stop-at-first" in sys.argv
    if mode == "package":
        importlib.import_module("pyspark_ledger")  # its import is what is probed
    stop = _busy_grpc()
    tried = failed = 0
    hung = False
    for _ in range(forks):
        tried += 1
        verdict = _fork_exec_fails()
        hung = verdict is None
        failed += verdict is not False
        if hung or (failed and stop_at_first):
            break  # a hung Popen holds its lock: no more forks from this process
    stop.set()
    if hung:
        _kill_own_children()
    print(json.dumps({"tried": tried, "failed": failed, "hung": hung,
                      "fork_support": os.environ.get("GRPC_ENABLE_FORK_SUPPORT")}), flush=True)
    os._exit(0)  # gRPC's threads are still in calls; the verdict is printed


if __name__ == "__main__":
    main()
