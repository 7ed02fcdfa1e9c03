"""Benchmark of the bookie storage engine alone (no gRPC).

    python bench/storage_bench.py                       # default matrix, fsync on
    python bench/storage_bench.py --seconds 5 --submitters 4 --entry-bytes 1024 --batch 500

Writes: N submitter threads, each with up to --inflight batches outstanding (as a gRPC stream
handler would have), each batch one add_batch call of --batch entries to its own ledger.
Reads: range reads of --read-batch entries over what was written (page cache).
Prints one table row per case; figures are medians over --repeats runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bookie.status import Status
from bookie.storage import BookieStorage, StorageConfig

# A submitter waits at most this long for one of its batches to complete.
BATCH_WAIT_TIMEOUT_S = 30.0


@dataclass
class WriteResult:
    entries_per_s: float
    mb_per_s: float
    groups_per_s: float
    entries_per_group: float
    fsync_p50_us: float
    busy: int
    cpu_us_per_entry: float  # process CPU (user + sys, all threads) per acknowledged entry


def run_writes(engine: BookieStorage, seconds: float, submitters: int, batch: int,
               entry_bytes: int, inflight: int, ledger_base: int) -> tuple[WriteResult, list[int]]:
    payload = os.urandom(entry_bytes)
    stop = threading.Event()
    written = [0] * submitters
    busy = [0] * submitters
    errors: list[str] = []

    def submitter(index: int) -> None:
        ledger = (7, ledger_base + index)
        slots = threading.Semaphore(inflight)
        next_id = 0

        def done(status: Status, n: int = batch) -> None:
            if status == Status.OK:
                written[index] += n
            elif status == Status.BUSY:
                busy[index] += 1
            else:
                errors.append(status.name)
            slots.release()

        while not stop.is_set():
            if not slots.acquire(timeout=BATCH_WAIT_TIMEOUT_S):
                errors.append("timeout")
                return
            first = next_id
            next_id += batch
            entries = [(e, e - 1, payload) for e in range(first, first + batch)]
            # Pipelined submitters measure the group-commit path; a lone add would be written
            # inline (one fsync each), which is the latency path, not the capacity being measured.
            engine.add_batch(ledger, b"bench-key", entries, False, done, allow_inline=False)
        for _ in range(inflight):  # drain
            slots.acquire(timeout=BATCH_WAIT_TIMEOUT_S)

    before = engine.stats()
    threads = [threading.Thread(target=submitter, args=(i,)) for i in range(submitters)]
    cpu_before = os.times()
    start = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    cpu_after = os.times()
    cpu_s = (cpu_after.user - cpu_before.user) + (cpu_after.system - cpu_before.system)
    after = engine.stats()
    if errors:
        raise RuntimeError(f"write errors: {errors[:5]}")
    total = sum(written)
    groups = after["groups"] - before["groups"]
    return WriteResult(
        entries_per_s=total / elapsed,
        mb_per_s=total * entry_bytes / elapsed / 1e6,
        groups_per_s=groups / elapsed,
        entries_per_group=total / groups if groups else 0.0,
        fsync_p50_us=after["fsync_latency"]["p50_us"],
        busy=sum(busy),
        cpu_us_per_entry=cpu_s / total * 1e6 if total else 0.0,
    ), written


def run_reads(engine: BookieStorage, seconds: float, ledgers: list[tuple[int, int]],
              counts: list[int], read_batch: int, threads: int) -> tuple[float, float]:
    """Range reads over the written entries; returns (entries/s, MB/s)."""
    stop = threading.Event()
    got = [0] * threads
    got_bytes = [0] * threads

    def reader(index: int) -> None:
        position = 0
        which = index
        while not stop.is_set():
            ledger, count = ledgers[which % len(ledgers)], counts[which % len(ledgers)]
            if count == 0:
                return
            first = position % max(count - read_batch, 1)
            status, results = engine.read_range(ledger, first, first + read_batch - 1,
                                                read_batch, 64 * 2**20)
            if status != Status.OK:
                raise RuntimeError(f"read failed {status}")
            got[index] += len(results)
            got_bytes[index] += sum(len(r.data) for r in results)
            position += read_batch * 7
            which += 1

    workers = [threading.Thread(target=reader, args=(i,)) for i in range(threads)]
    start = time.perf_counter()
    for t in workers:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in workers:
        t.join()
    elapsed = time.perf_counter() - start
    return sum(got) / elapsed, sum(got_bytes) / elapsed / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=None, help="data dir parent (default: a temp dir)")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--submitters", type=int, nargs="*", default=[4])
    parser.add_argument("--inflight", type=int, default=4, help="batches outstanding per submitter")
    parser.add_argument("--entry-bytes", type=int, nargs="*", default=[1024, 100])
    parser.add_argument("--batch", type=int, nargs="*", default=[100, 1000])
    parser.add_argument("--read-batch", type=int, default=1000)
    parser.add_argument("--read-threads", type=int, default=2)
    parser.add_argument("--no-fsync", action="store_true")
    parser.add_argument("--group-wait-ms", type=float, default=0.0)
    args = parser.parse_args()

    parent = args.dir or Path(tempfile.mkdtemp(prefix="storage-bench-"))
    print(f"# data dir {parent}, fsync={'off' if args.no_fsync else 'on'}, "
          f"{args.seconds}s x {args.repeats} runs per case (median), inflight={args.inflight}")
    header = (f"{'entry B':>7} {'batch':>5} {'subm':>4} | {'write ent/s':>11} {'MB/s':>6} "
              f"{'groups/s':>8} {'ent/group':>9} {'fsync p50':>9} {'cpu us/ent':>10} {'busy':>4} | "
              f"{'read ent/s':>10} {'read MB/s':>9}")
    print(header)
    print("-" * len(header))
    case = 0
    try:
        for entry_bytes in args.entry_bytes:
            for batch in args.batch:
                for submitters in args.submitters:
                    writes: list[WriteResult] = []
                    reads: list[tuple[float, float]] = []
                    for _ in range(args.repeats):
                        case += 1
                        data_dir = parent / f"case-{case}"
                        config = StorageConfig(data_dir=data_dir, fsync=not args.no_fsync,
                                               journal_max_group_wait_ms=args.group_wait_ms,
                                               checkpoint_interval_s=60.0)
                        engine = BookieStorage.open(config)
                        try:
                            result, written = run_writes(engine, args.seconds, submitters, batch,
                                                         entry_bytes, args.inflight, case * 1000)
                            writes.append(result)
                            ledgers = [(7, case * 1000 + i) for i in range(submitters)]
                            reads.append(run_reads(engine, args.seconds, ledgers, written,
                                                   args.read_batch, args.read_threads))
                        finally:
                            engine.close()
                            shutil.rmtree(data_dir, ignore_errors=True)

                    def med(values: list[float]) -> float:
                        return statistics.median(values)

                    print(f"{entry_bytes:>7} {batch:>5} {submitters:>4} | "
                          f"{med([w.entries_per_s for w in writes]):>11,.0f} "
                          f"{med([w.mb_per_s for w in writes]):>6.0f} "
                          f"{med([w.groups_per_s for w in writes]):>8,.0f} "
                          f"{med([w.entries_per_group for w in writes]):>9,.0f} "
                          f"{med([w.fsync_p50_us for w in writes]):>7.0f}us "
                          f"{med([w.cpu_us_per_entry for w in writes]):>10.2f} "
                          f"{sum(w.busy for w in writes):>4} | "
                          f"{med([r[0] for r in reads]):>10,.0f} {med([r[1] for r in reads]):>9.0f}",
                          flush=True)
    finally:
        if args.dir is None:
            shutil.rmtree(parent, ignore_errors=True)


if __name__ == "__main__":
    main()
