"""Benchmark one bookie on loopback: durable add throughput and range-read throughput.

Starts a real `bookie` process (fsync on, embedded metadata), streams batches of entries from one
client with a bounded number of batches in flight, then range-reads them back. Prints a table.

    python bench/bookie_bench.py [--entries 200000] [--batch 500] [--inflight 32]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

from bookie.status import Status
from pyspark_ledger.testing.local_cluster import LocalBookie
from pyspark_ledger.transport.bookie_client import BookieClient

KEY = b"bench-master-key-000"


def run_adds(client: BookieClient, ledger: tuple[int, int], size: int, total: int, batch: int, inflight: int) -> dict[str, float]:
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    sem = threading.Semaphore(inflight)
    latencies: list[float] = []
    errors: list[str] = []
    done = threading.Event()
    remaining = [total // batch]
    lock = threading.Lock()
    start = time.perf_counter()
    for b in range(total // batch):
        assert sem.acquire(timeout=60), "bookie stopped acknowledging"
        sent_at = time.perf_counter()

        def cb(status: Status, msg: str, sent_at: float = sent_at) -> None:
            latencies.append(time.perf_counter() - sent_at)
            if status != Status.OK:
                errors.append(f"{status.name} {msg}")
            sem.release()
            with lock:
                remaining[0] -= 1
                if remaining[0] == 0:
                    done.set()

        first = b * batch
        client.add_batch(ledger, KEY, [(e, e - 1, payload) for e in range(first, first + batch)], cb)
    assert done.wait(120), "adds did not finish"
    elapsed = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"{len(errors)} add batches failed, first: {errors[0]}")
    n = (total // batch) * batch
    return {
        "entries_s": n / elapsed,
        "mb_s": n * size / elapsed / 1e6,
        "batch_p50_ms": statistics.median(latencies) * 1000,
    }


def run_reads(client: BookieClient, ledger: tuple[int, int], last: int, size: int, rounds: int = 3) -> dict[str, float]:
    best = 0.0
    for _ in range(rounds):
        start = time.perf_counter()
        nbytes = 0
        nxt = 0
        while nxt <= last:
            resp = client.read(ledger, nxt, last, max_bytes=8 * 2**20, max_entries=65536)
            nbytes += sum(len(e) for e in resp.entries)
            nxt = resp.entry_ids[-1] + 1
        elapsed = time.perf_counter() - start
        best = max(best, nbytes / elapsed / 1e6)
    return {"mb_s": best, "entries_s": best * 1e6 / size}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--entries", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--inflight", type=int, default=32)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bookie-bench-") as tmp:
        bookie = LocalBookie(f"sqlite://{Path(tmp) / 'meta.db'}", Path(tmp) / "data",
                             extra_args=["--no-verify-ledger-keys"]).start()  # raw ledgers: no metadata
        client = BookieClient(bookie.bookie_id, bookie.address, add_timeout_s=60)
        rows = []
        try:
            for i, size in enumerate((1024, 100)):
                ledger = (0, 100 + i)
                # Warm-up, then the measured run.
                run_adds(client, (0, 900 + i), size, min(20_000, args.entries), args.batch, args.inflight)
                add = run_adds(client, ledger, size, args.entries, args.batch, args.inflight)
                read = run_reads(client, ledger, (args.entries // args.batch) * args.batch - 1, size)
                rows.append((size, add, read))
        finally:
            client.close()
            bookie.stop()
    print(f"\none bookie, loopback, fsync on, batches of {args.batch} entries, {args.inflight} batches in flight")
    print(f"{'entry':>7} | {'adds/s':>10} | {'add MB/s':>9} | {'batch p50 ms':>12} | "
          f"{'range read MB/s':>15} | {'reads entries/s':>15}")
    print("-" * 82)
    for size, add, read in rows:
        print(f"{size:>6}B | {add['entries_s']:>10,.0f} | {add['mb_s']:>9.1f} | {add['batch_p50_ms']:>12.2f} | "
              f"{read['mb_s']:>15.1f} | {read['entries_s']:>15,.0f}")


if __name__ == "__main__":
    main()
