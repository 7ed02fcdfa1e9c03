"""Benchmark the ledger client against 3 real bookies and a real ZooKeeper, next to NATS JetStream.

E=3, W=3, A=2; one client; fsync on (one fdatasync per group commit on each bookie). Throughput is
pipelined async adds with a bounded number in flight; latency is one add at a time at low load,
measured first, on a quiet disk (not during the writeback the throughput runs leave behind).
In the same run, a 3-node NATS JetStream cluster (replicas=3, Python nats-py, async publish) is
measured with the same payloads (bench/nats_baseline.py; needs Debian's nats-server and nats-py,
and is skipped with a note if they are missing).

LogWriter rows (bench/log_writer_rows.py): batched and unbatched messages of 100 B and 1 KiB from
one producer and four, p50/p99 of a batched message at 10% and 90% of peak, and medians of
alternating batched/unbatched rounds of 100-byte messages (issue 30).

Run rows (bench/run_rows.py): WriteHandle.add_entries_async runs of 256 entries against single
adds, 100 B and 1 KiB, alternating rounds, medians (issue 30 item 2).

    python bench/client_bench.py [--entries 100000] [--latency-adds 2000] [--no-nats]
                                 [--log-messages 300000] [--log-rounds 3] [--no-log-writer]
                                 [--run-entries 200000] [--run-rounds 3] [--no-runs]
    python bench/client_bench.py --journal-dir-layouts [--rounds 3] --no-nats
    python bench/client_bench.py --stamps-only [--log-messages 300000] [--log-rounds 5]
        (three rows: plain; event time + constant header; event time + own header value each message)
    python bench/client_bench.py --disk-ratio-only [--log-messages 300000] [--log-rounds 3]

The LogWriter rows include batched 1 KiB messages against this disk's write + fdatasync bandwidth
divided by three, both measured alternately in the same run (bench/log_writer_rows.py
disk_ratio_row); --disk-ratio-only runs that row alone.

--journal-dir-layouts measures, in the same run, bookies with today's single --data-dir against
bookies with a --journal-dir of their own and two --ledger-dirs (all on this machine's one disk),
alternating the two layouts --rounds times (each round in the other order); figures are medians
over the rounds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine_speed import machine_speed_line

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.testing.zookeeper_server import LocalZooKeeper
from pyspark_ledger.transport.add_future import AddFuture

INFLIGHT_MAX = 5_000


def throughput(client: LedgerClient, size: int, total: int) -> float:
    """Pipelined async adds, at most INFLIGHT_MAX unacknowledged: the producer waits for the
    oldest add once the window is full (the usual way to bound a pipeline, and the cheapest)."""
    w = client.create_ledger(3, 3, 2)
    payload = b"p" * size
    window: deque[AddFuture] = deque()
    start = time.perf_counter()
    for _ in range(total):
        if len(window) >= INFLIGHT_MAX:
            window.popleft().result(timeout=60)
        window.append(w.add_entry_async(payload))
    for f in window:
        f.result(timeout=60)
    elapsed = time.perf_counter() - start
    w.close()
    return total / elapsed


def latency(client: LedgerClient, size: int, n: int) -> tuple[float, float]:
    w = client.create_ledger(3, 3, 2)
    payload = b"l" * size
    for _ in range(50):
        w.add_entry(payload)  # warm up
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        w.add_entry(payload)
        samples.append(time.perf_counter() - t)
    w.close()
    samples.sort()
    return statistics.median(samples) * 1000, samples[int(len(samples) * 0.99) - 1] * 1000


def bookie_dirs(layout: str, root: Path, i: int) -> list[str]:
    """Extra bookie flags of a layout: "data-dir" is LocalCluster's own --data-dir alone."""
    if layout == "data-dir":
        return []
    base = root / f"bookie-{i}-dirs"
    return ["--journal-dir", str(base / "journal"), "--ledger-dirs", f"{base / 'ledgers-1'},{base / 'ledgers-2'}"]


def measure_layout(zk: LocalZooKeeper, root: Path, layout: str,
                   args: argparse.Namespace) -> dict[int, tuple[float, float, float]]:
    """size -> (acked/s, p50 ms, p99 ms) on three fresh bookies of one directory layout."""
    with LocalCluster(0, metadata_uri=zk.uri(f"/bench-{root.name}"), work_dir=root) as cluster:
        for i in range(3):
            cluster.add_bookie(extra_args=bookie_dirs(layout, root, i))
        with LedgerClient(cluster.metadata_uri) as client:
            # Latency first: after a throughput run the kernel is still writing back
            # hundreds of MB of entry logs, and "low load" latency would measure that.
            latencies = {size: latency(client, size, args.latency_adds) for size in (1024, 100)}
            return {size: (throughput(client, size, args.entries), *latencies[size]) for size in (1024, 100)}


def stamps_only(args: argparse.Namespace) -> None:
    from log_writer_rows import stamps_rows

    from pyspark_ledger.testing.message_batches import set_message_batches

    with tempfile.TemporaryDirectory(prefix="client-bench-") as tmp, LocalZooKeeper(Path(tmp) / "zk") as zk, \
            LocalCluster(3, metadata_uri=zk.uri("/bench-stamps"), work_dir=Path(tmp) / "log-writer") as cluster, \
            LedgerClient(cluster.metadata_uri) as client:
        set_message_batches(client, True)
        rows = stamps_rows(client, args.log_messages, args.log_rounds)
    print(machine_speed_line())
    print_table(rows)


def disk_ratio_only(args: argparse.Namespace) -> None:
    from log_writer_rows import disk_ratio_row

    from pyspark_ledger.testing.message_batches import set_message_batches

    with tempfile.TemporaryDirectory(prefix="client-bench-") as tmp, LocalZooKeeper(Path(tmp) / "zk") as zk, \
            LocalCluster(3, metadata_uri=zk.uri("/bench-disk"), work_dir=Path(tmp) / "log-writer") as cluster, \
            LedgerClient(cluster.metadata_uri) as client:
        set_message_batches(client, True)
        print(machine_speed_line())
        row = disk_ratio_row(client, args.log_messages, args.log_rounds, str(cluster.work_dir))
    print(row)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--latency-adds", type=int, default=2_000)
    ap.add_argument("--no-nats", action="store_true")
    ap.add_argument("--journal-dir-layouts", action="store_true",
                    help="compare a single --data-dir with --journal-dir + two --ledger-dirs, same run")
    ap.add_argument("--rounds", type=int, default=1, help="with --journal-dir-layouts: alternations of the two")
    ap.add_argument("--log-messages", type=int, default=300_000, help="messages per batched LogWriter run")
    ap.add_argument("--log-rounds", type=int, default=3, help="alternating batched/unbatched rounds")
    ap.add_argument("--no-log-writer", action="store_true", help="skip the LogWriter rows")
    ap.add_argument("--stamps-only", action="store_true",
                    help="only the LogWriter row of messages with and without an event time and a header (issue 32)")
    ap.add_argument("--run-entries", type=int, default=200_000, help="entries per add_entries_async round")
    ap.add_argument("--run-rounds", type=int, default=3, help="alternating runs/singles rounds")
    ap.add_argument("--no-runs", action="store_true", help="skip the add_entries_async rows")
    ap.add_argument("--disk-ratio-only", action="store_true",
                    help="only batched 1 KiB messages against this disk's write + fdatasync bandwidth / 3 (issue 30)")
    args = ap.parse_args()
    if args.disk_ratio_only:
        disk_ratio_only(args)
        return
    if args.stamps_only:
        stamps_only(args)
        return
    layouts = ["data-dir", "journal-dir"] if args.journal_dir_layouts else ["data-dir"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="client-bench-") as tmp:
        with LocalZooKeeper(Path(tmp) / "zk") as zk:
            runs: dict[str, list[dict[int, tuple[float, float, float]]]] = {layout: [] for layout in layouts}
            for r in range(max(args.rounds, 1)):
                # Each round reverses the order: the second cluster of a round starts while the
                # kernel still writes back the first one's entry logs.
                for layout in layouts if r % 2 == 0 else layouts[::-1]:
                    runs[layout].append(measure_layout(zk, Path(tmp) / f"{layout}-{r}", layout, args))
                    if len(layouts) > 1:
                        print(f"round {r} {layout:<12} " + "  ".join(
                            f"{size}B {runs[layout][-1][size][0]:>9,.0f}/s" for size in (1024, 100)), flush=True)
            for layout in layouts:
                name = "pyspark-ledger E3/W3/A2" if len(layouts) == 1 else f"E3/W3/A2 {layout}"
                for size in (1024, 100):
                    rate, p50, p99 = (statistics.median(run[size][k] for run in runs[layout]) for k in range(3))
                    rows.append((name, size, rate, p50, p99, "acked after fdatasync (group commit) on 2 of 3 bookies"))
            if not args.no_log_writer:
                from log_writer_rows import disk_ratio_row
                from log_writer_rows import rows as log_writer_rows

                with LocalCluster(3, metadata_uri=zk.uri("/bench-log-writer"), work_dir=Path(tmp) / "log-writer") as cluster:
                    with LedgerClient(cluster.metadata_uri) as client:
                        rows += log_writer_rows(client, args.log_messages, args.log_rounds)
                        rows.append(disk_ratio_row(client, args.log_messages, args.log_rounds, str(cluster.work_dir)))
            if not args.no_runs:
                from run_rows import rows as run_rows

                with LocalCluster(3, metadata_uri=zk.uri("/bench-runs"), work_dir=Path(tmp) / "runs") as cluster:
                    with LedgerClient(cluster.metadata_uri) as client:
                        rows += run_rows(client, args.run_entries, args.run_rounds)
    if not args.no_nats:
        try:
            from nats_baseline import NatsCluster, measure

            with NatsCluster() as nats:
                for size in (1024, 100):
                    r = measure(size, min(args.entries, 50_000), cluster=nats, latency_messages=args.latency_adds)
                    rows.append(("NATS JetStream R3", size, r["msgs_per_s"], r["p50_ms"], r["p99_ms"],
                                 "acked in memory on 2 of 3 (no fsync per message)"))
        except Exception as exc:  # noqa: BLE001 - the baseline is optional
            print(f"(NATS baseline skipped: {exc})")
    print()
    print(machine_speed_line())
    print_table(rows)


def print_table(rows: list[tuple[str, int, float, float, float, str]]) -> None:
    print(f"{'system':<26} | {'entry':>6} | {'acked/s':>9} | {'MB/s':>6} | {'p50 ms':>6} | {'p99 ms':>6} | "
          "durability / what the row measures")
    print("-" * 118)
    for name, size, rate, p50, p99, durability in rows:
        print(f"{name:<26} | {size:>5}B | {rate:>9,.0f} | {rate * size / 1e6:>6.1f} | {p50:>6.2f} | {p99:>6.2f} | {durability}")


if __name__ == "__main__":
    main()
