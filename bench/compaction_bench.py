"""Adds while compaction rewrites entry logs, against adds alone, in the same run.

    python bench/compaction_bench.py                      # 3 rounds, 32 MiB of garbage each
    python bench/compaction_bench.py --rounds 5 --garbage-mb 128 --rate-mb-s 50

Storage engine only (no gRPC). Each round: write two interleaved ledgers and delete one, so
every entry log is about half live; then measure `--seconds` of adds (a window of in-flight
add_batch calls) without compaction, and the same with a major compaction of those logs
running at `--rate-mb-s` on another thread. Prints add throughput and p99 add latency per
phase (median over the rounds) and the ratio with/without (target >= 70%).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bookie.status import Status
from bookie.storage import BookieStorage, StorageConfig

KEY = b"bench"
ENTRY = b"x" * 1024
BATCH = 16
WINDOW = 64  # add_batch calls in flight
LOG_MAX = 8 * 2**20


def _add_sync(engine: BookieStorage, ledger: tuple[int, int], first: int, size: int) -> None:
    done = threading.Event()
    entries = [(e, e - 1, b"g" * size) for e in range(first, first + BATCH)]
    engine.add_batch(ledger, KEY, entries, False, lambda s: done.set())
    done.wait(30)


def _make_garbage(engine: BookieStorage, round_no: int, garbage_mb: int) -> None:
    gone, kept = (1, round_no), (2, round_no)
    per_batch = BATCH * 4096
    for i in range(garbage_mb * 2**20 // per_batch):
        for ledger in (gone, kept):
            _add_sync(engine, ledger, i * BATCH, 4096)
    assert engine.delete_ledger(gone) == Status.OK


def _adds(engine: BookieStorage, ledger: tuple[int, int], seconds: float) -> tuple[float, float]:
    """(entries/s, p99 latency ms) of a window of add_batch calls for `seconds`."""
    sem = threading.Semaphore(WINDOW)
    latencies: list[float] = []
    lock = threading.Lock()
    next_id = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        sem.acquire()
        t0 = time.perf_counter()

        def on_done(status: Status, t0: float = t0) -> None:
            with lock:
                latencies.append(time.perf_counter() - t0)
            sem.release()
        entries = [(e, e - 1, ENTRY) for e in range(next_id, next_id + BATCH)]
        engine.add_batch(ledger, KEY, entries, False, on_done)
        next_id += BATCH
    for _ in range(WINDOW):
        sem.acquire(timeout=30)
    elapsed = time.monotonic() - started
    latencies.sort()
    p99 = latencies[int(0.99 * (len(latencies) - 1))] * 1000 if latencies else 0.0
    return len(latencies) * BATCH / elapsed, p99


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--garbage-mb", type=int, default=32)
    ap.add_argument("--rate-mb-s", type=float, default=50.0)
    args = ap.parse_args()
    rows: dict[str, list[tuple[float, float]]] = {"without": [], "with": []}
    with tempfile.TemporaryDirectory(prefix="compaction-bench-") as tmp:
        engine = BookieStorage.open(StorageConfig(data_dir=Path(tmp), checkpoint_interval_s=0.0,
                                                  entry_log_max_bytes=LOG_MAX))
        try:
            for r in range(args.rounds):
                _make_garbage(engine, r, args.garbage_mb)
                rows["without"].append(_adds(engine, (3, 2 * r), args.seconds))
                compacted: list[tuple[int, int]] = []
                worker = threading.Thread(target=lambda: compacted.append(
                    engine.compact_entry_logs(0.8, args.rate_mb_s * 2**20)))
                worker.start()
                rows["with"].append(_adds(engine, (3, 2 * r + 1), args.seconds))
                worker.join(600)
                print(f"round {r}: compaction logs={compacted[0][0] if compacted else '?'} "
                      f"freed_mb={compacted[0][1] / 2**20 if compacted else 0:.1f}")
        finally:
            engine.close()
    med = {k: (statistics.median(t for t, _ in v), statistics.median(p for _, p in v))
           for k, v in rows.items()}
    print(f"{'phase':<10} {'adds/s (median)':>16} {'p99 add ms (median)':>20}")
    for k in ("without", "with"):
        print(f"{k:<10} {med[k][0]:>16.0f} {med[k][1]:>20.2f}")
    print(f"throughput with/without: {med['with'][0] / med['without'][0]:.0%} (target >= 70%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
