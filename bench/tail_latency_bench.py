"""Tail latency of an idle writer: how long after its ack an entry reaches a tailing reader, when
the writer pauses after every add (the reader learns of it by a long-poll LAC read, not by
polling on a timer). 3 real bookies (E3 W3 A2), the embedded metadata store. Prints a table of
the delay per entry (median, p90, max) for each round; the target is a max under 100 ms.

    python bench/tail_latency_bench.py [--rounds 3] [--entries 20] [--idle-s 0.15]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine_speed import machine_speed_line

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.local_cluster import LocalCluster

TARGET_MAX_MS = 100.0


def one_round(client: LedgerClient, entries: int, idle_s: float) -> list[float]:
    writer = client.create_ledger(3, 3, 2)
    reader = client.open_ledger(writer.ledger_id)
    seen: dict[int, float] = {}

    def tail() -> None:
        for e in reader.tail(0, idle_timeout_s=10):
            seen[e.entry_id] = time.monotonic()
            if e.entry_id == entries - 1:
                return

    t = threading.Thread(target=tail, daemon=True)
    t.start()
    acked: dict[int, float] = {}
    for i in range(entries):
        writer.add_entry(b"tail-%d" % i)
        acked[i] = time.monotonic()
        time.sleep(idle_s)
    t.join(timeout=30)
    writer.close()
    if sorted(seen) != list(range(entries)):
        raise SystemExit(f"the reader saw {len(seen)} of {entries} entries")
    return sorted((seen[i] - acked[i]) * 1000 for i in range(entries))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--entries", type=int, default=20)
    ap.add_argument("--idle-s", type=float, default=0.15)
    args = ap.parse_args()
    print(machine_speed_line())
    with tempfile.TemporaryDirectory() as work:
        with LocalCluster(3, work_dir=Path(work)) as cluster, LedgerClient(cluster.metadata_uri) as client:
            print(f"{'round':>5} {'median ms':>10} {'p90 ms':>8} {'max ms':>8}")
            maxes = []
            for r in range(args.rounds):
                d = one_round(client, args.entries, args.idle_s)
                maxes.append(d[-1])
                print(f"{r + 1:>5} {statistics.median(d):>10.1f} {d[int(0.9 * (len(d) - 1))]:>8.1f} {d[-1]:>8.1f}")
            print(f"median of the rounds' max: {statistics.median(maxes):.1f} ms (target < {TARGET_MAX_MS:.0f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
