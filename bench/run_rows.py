"""client_bench rows for run-encoded adds (issue 30 item 2): WriteHandle.add_entries_async with runs
of RUN_ENTRIES entries against single add_entry_async adds, 100 B and 1 KiB, E3/W3/A2, the same
cluster, alternating rounds (each round in the other order), medians reported.

Both keep at most INFLIGHT_MAX entries unacknowledged (the producer waits for the oldest future
once the window is full), so they differ only in the submit path: one future, one lock step and
one encoded batch per run, against one of each per entry (the transport coalesces both). Beside
the rate, each row gives the client's CPU time per entry (this process only: the bookies are
processes of their own), which a loaded machine moves far less than the rate."""

from __future__ import annotations

import statistics
import time
from collections import deque

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.transport.add_future import AddFuture

INFLIGHT_MAX = 5_000
RUN_ENTRIES = 256
Row = tuple[str, int, float, float, float, str]


def singles(client: LedgerClient, size: int, total: int) -> tuple[float, float]:
    w = client.create_ledger(3, 3, 2)
    payload = b"s" * size
    window: deque[AddFuture] = deque()
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(total):
        if len(window) >= INFLIGHT_MAX:
            window.popleft().result(timeout=120)
        window.append(w.add_entry_async(payload))
    for f in window:
        f.result(timeout=120)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    w.close()
    return total / elapsed, cpu / total * 1e6


def runs(client: LedgerClient, size: int, total: int) -> tuple[float, float]:
    w = client.create_ledger(3, 3, 2)
    run = [b"r" * size] * RUN_ENTRIES
    window: deque[AddFuture] = deque()
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(total // RUN_ENTRIES):
        if len(window) * RUN_ENTRIES >= INFLIGHT_MAX:
            window.popleft().result(timeout=120)
        window.append(w.add_entries_async(run))
    for f in window:
        f.result(timeout=120)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    w.close()
    n = (total // RUN_ENTRIES) * RUN_ENTRIES
    return n / elapsed, cpu / n * 1e6


def rows(client: LedgerClient, total: int, rounds: int) -> list[Row]:
    """Alternating rounds of runs and singles per size: medians, printed as they come."""
    out: list[Row] = []
    for size in (100, 1024):
        got: dict[str, list[tuple[float, float]]] = {"runs": [], "singles": []}
        for r in range(max(rounds, 1)):
            order = ("runs", "singles") if r % 2 == 0 else ("singles", "runs")
            for kind in order:
                got[kind].append((runs if kind == "runs" else singles)(client, size, total))
            (rr, rc), (sr, sc) = got["runs"][-1], got["singles"][-1]
            print(f"round {r} {size}B runs {rr:>9,.0f}/s {rc:.2f} us/entry  singles {sr:>9,.0f}/s {sc:.2f} us/entry",
                  flush=True)
        for kind, label in (("runs", f"add_entries_async x{RUN_ENTRIES}"), ("singles", "add_entry_async")):
            rate = statistics.median(g[0] for g in got[kind])
            cpu = statistics.median(g[1] for g in got[kind])
            out.append((label, size, rate, 0.0, 0.0,
                        f"E3/W3/A2, client CPU {cpu:.2f} us/entry, median of {len(got[kind])} alternating rounds"))
    return out
