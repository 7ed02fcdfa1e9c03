"""Time for a new log writer to take over from a writer killed (kill -9) with large entries in
flight, on 3 real bookies (E3 W3 A2) and a real ZooKeeper: (a) 14 x 1 MiB in flight, (b) 600 x
10 KB in flight, 3 entries acknowledged before the burst each time.

Method (pyspark_ledger/testing/takeover.py): the writer process appends 3 entries one by one;
two of the three bookies (all but A-1) are SIGSTOPped, so no add of the burst can be
acknowledged; the writer sends the burst with append_async and says SENT; --settle-s later it
is killed -9 and the bookies resumed. A standby client (connected before the kill) opens the log
as writer (fencing and recovering the previous ledger, creating a new one) and appends one entry.
Time to take over = kill -> that append acknowledged; "open" = kill -> the writer opened.
Each run checks that every acknowledged entry read back intact (a run that loses one aborts).

    python bench/takeover_bench.py [--runs 7] [--settle-s 0.3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine_speed import machine_speed_line

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.testing.takeover import TakeoverResult, run_takeover
from pyspark_ledger.testing.zookeeper_server import LocalZooKeeper

CASES = (("14 x 1 MiB", 14, 2**20), ("600 x 10 KB", 600, 10_000))
TARGET_MEDIAN_S = 5.0


def run_case(client: LedgerClient, cluster: LocalCluster, label: str, count: int, size: int, runs: int,
             settle_s: float) -> list[TakeoverResult]:
    results = []
    for i in range(runs):
        r = run_takeover(client, cluster.bookies, f"bench-{count}x{size}-{i}", count=count, size=size,
                         acked_first=3, settle_s=settle_s)
        if r.counters.violations() or not r.sent:
            raise SystemExit(f"{label} run {i}: sent={r.sent} violations={r.counters.violations()}")
        print(f"  {label} run {i}: take over {r.takeover_s * 1000:7.1f} ms (open {r.open_s * 1000:7.1f} ms), "
              f"old writer acked {len(r.acked)}, {r.old_in_log - len(r.acked)} unacknowledged entries recovered",
              flush=True)
        results.append(r)
    return results


def table(rows: dict[str, list[TakeoverResult]]) -> str:
    head = f"{'case':<14} {'runs':>4} {'median s':>9} {'min s':>7} {'max s':>7} {'open med s':>10} {'target':>8}"
    lines = [head, "-" * len(head)]
    for label, rs in rows.items():
        t = [r.takeover_s for r in rs]
        med = statistics.median(t)
        ok = "ok" if med < TARGET_MEDIAN_S else "MISSED"
        lines.append(f"{label:<14} {len(t):>4} {med:>9.3f} {min(t):>7.3f} {max(t):>7.3f} "
                     f"{statistics.median(r.open_s for r in rs):>10.3f} {ok:>8}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--settle-s", type=float, default=0.3, help="from the writer's SENT to the kill")
    args = ap.parse_args()
    print(machine_speed_line(), flush=True)
    rows: dict[str, list[TakeoverResult]] = {}
    with tempfile.TemporaryDirectory(prefix="takeover-bench-") as tmp:
        with LocalZooKeeper(Path(tmp) / "zk") as zk:
            with LocalCluster(3, metadata_uri=zk.uri("/bench"), work_dir=Path(tmp) / "cluster") as cluster, \
                    LedgerClient(zk.uri("/bench")) as client:
                for label, count, size in CASES:
                    rows[label] = run_case(client, cluster, label, count, size, args.runs, args.settle_s)
    print(f"\ntime to take over (kill -9 -> new writer's first acknowledged append), target median < "
          f"{TARGET_MEDIAN_S:g} s")
    print(table(rows))


if __name__ == "__main__":
    main()
