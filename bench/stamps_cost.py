"""What an event time and a header cost the producer per message, without bookies (issue 32).

The cluster bench (client_bench.py --stamps-only, before_after.py --kinds batched,stamped,varying)
gives the rates the issue's bound is about, but on a shared 2-core machine they swing 2-4x between
rounds. This measures the producer's own work alone, as thread CPU time (steady under load): the
bench's loop of LogWriter.append_async with a window of log_writer_rows.WINDOW_MESSAGES handles waited on in turn, against
a writer whose ledger acknowledges every entry at once (batches are still encoded), for the three
kinds of client_bench's stamps rows (log_writer_rows.STAMP_KINDS), in alternating rounds; and
OpenBatch.add + encode alone. With --before TREE each round runs both trees (child processes,
the tree first on PYTHONPATH), alternating which goes first.

    python bench/stamps_cost.py [--before /tmp/before] [--rounds 7] [--messages 200000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
KINDS = ("plain", "stamped", "varying")
STAMPED: dict[str, bool | str] = {"plain": False, "stamped": True, "varying": "varying"}  # append_loop's kinds


class _Acked:
    """An add that is acknowledged at once (entry id 0)."""

    def add_done_callback(self, fn: Any) -> None:
        fn(self)

    def exception(self) -> None:
        return None

    def result(self) -> int:
        return 0


def _writer() -> Any:
    """A batching LogWriter (linger on, the defaults) whose ledger acknowledges at once."""
    from pyspark_ledger.log.batching import BatchSettings
    from pyspark_ledger.log.rollover import RolloverPolicy
    from pyspark_ledger.log.writer import LogWriter

    w: Any = object.__new__(LogWriter)
    w.name, w._lock, w._stopped, w._closed, w.batching, w.batch = "bench", threading.RLock(), None, False, True, BatchSettings()
    w._batch, w._last_sent, w._append_ms, w.rollover = None, None, 0, RolloverPolicy()
    w._entries, w._bytes, w._opened_at, w._ledger_times_ms, w._seq = 0, 0, time.monotonic(), None, 0
    w._linger = type("NoLinger", (), {"batch_opened": lambda self: None})()  # sends by count and bytes only
    w._batch_max_bytes, w._last_index = w.batch.max_bytes, w.batch.max_messages - 1  # read by trees that have them
    acked = _Acked()
    w._add = lambda data, append_ms=None: (acked, 0, 1)
    return w


def produce_ns(kind: str, total: int) -> float:
    """Thread CPU ns per message of client_bench's producer loop (log_writer_rows.append_loop)."""
    from log_writer_rows import append_loop

    w = _writer()
    start = time.thread_time()
    append_loop(w, 100, total, STAMPED[kind])
    return (time.thread_time() - start) / total * 1e9


def batch_ns(kind: str, batches: int = 40) -> float:
    """Thread CPU ns per message of OpenBatch.add + encode, 1,000 messages a batch, best batch."""
    from log_writer_rows import STAMP_HEADERS, VARYING_HEADERS

    from pyspark_ledger.log.batching import OpenBatch

    payload, event_ms, best = b"p" * 100, time.time_ns() // 1_000_000, float("inf")
    for _ in range(batches):
        b = OpenBatch(0.0)
        add = b.add
        start = time.thread_time()
        for i in range(1000):
            if kind == "varying":
                add(payload, None, event_ms + i, VARYING_HEADERS[i & 4095])
            elif kind == "stamped":
                add(payload, None, event_ms, STAMP_HEADERS)
            else:
                add(payload, None, None, None)
        b.encode(event_ms)
        best = min(best, (time.thread_time() - start) / 1000 * 1e9)
    return best


def child(total: int) -> None:
    import pyspark_ledger

    print(pyspark_ledger.__file__, *(f"{produce_ns(k, total):.1f} {batch_ns(k):.1f}" for k in KINDS))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--before", type=Path, help="another tree (e.g. a worktree of main) measured in the same rounds")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.messages)
        return
    trees = {"after": HERE.parent} | ({"before": args.before.resolve()} if args.before else {})
    got: dict[str, list[list[float]]] = {name: [] for name in trees}
    for r in range(args.rounds):
        for name in list(trees)[::-1 if r % 2 else 1]:
            out = subprocess.run([sys.executable, str(HERE / "stamps_cost.py"), "--child", "--messages", str(args.messages)],
                                 env={**os.environ, "PYTHONPATH": str(trees[name])}, capture_output=True, text=True,
                                 timeout=900, check=True).stdout.split()
            if not out[0].startswith(str(trees[name]) + os.sep):
                raise RuntimeError(f"the child meant to run {trees[name]} imported {out[0]}")
            got[name].append([float(x) for x in out[1:]])
        print(f"round {r + 1} done, load {os.getloadavg()[0]:.1f}", flush=True)
    for name in trees:
        med = [statistics.median(row[j] for row in got[name]) for j in range(6)]
        loop, batch = med[0::2], med[1::2]
        print(f"{name:>6}: producer loop per message (thread CPU, medians of {args.rounds} rounds): "
              + ", ".join(f"{k} {loop[j]:.0f} ns" + ("" if j == 0 else f" (+{loop[j] - loop[0]:.0f}, "
                                                              f"{100 * (loop[j] / loop[0] - 1):+.1f}%)")
                          for j, k in enumerate(KINDS))
              + "; OpenBatch add + encode: " + ", ".join(f"{k} {batch[j]:.0f} ns" for j, k in enumerate(KINDS)))


if __name__ == "__main__":
    main()
