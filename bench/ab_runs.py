"""Run rows of two source trees side by side (bench/run_rows.py's measurements): one cluster,
clients of tree A and tree B in alternating rounds (each round in the other order), medians.

    python bench/ab_runs.py --before /tmp/tree-before --after . [--rounds 5] [--entries 100000]

Each measurement is a fresh client process whose PYTHONPATH is that tree, against the same
three bookies (started from this tree; their code is not what is compared). Rows: runs of 256
(add_entries_async) at 100 B and 1 KiB, and single adds (add_entry_async) at 1 KiB; each gives
acked entries/s and the client process's CPU time per entry. The load average is printed beside
every round: on a shared machine compare the two columns of one run, never runs of two days."""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.testing.zookeeper_server import LocalZooKeeper

# What a client process runs: one measurement, printed as JSON (rate, CPU us per entry).
# The tree goes first on sys.path explicitly: `python -c` puts the working directory ahead of
# PYTHONPATH, and the working directory is the tree too, so neither can pick up the other tree.
_CHILD = """
import json, sys
sys.path[:0] = [{tree!r}, {bench!r}]
from run_rows import runs, singles
from pyspark_ledger.client import LedgerClient
with LedgerClient({uri!r}) as client:
    rate, cpu = ({kind})(client, {size}, {entries})
import pyspark_ledger
print(json.dumps([rate, cpu, pyspark_ledger.__file__]))
"""
ROWS = (("runs", 100), ("runs", 1024), ("singles", 1024))
CHILD_TIMEOUT_S = 900


def measure(tree: Path, uri: str, kind: str, size: int, entries: int) -> tuple[float, float]:
    code = _CHILD.format(tree=str(tree), bench=str(Path(__file__).resolve().parent), uri=uri, kind=kind,
                         size=size, entries=entries)
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tree, capture_output=True, text=True,
                         timeout=CHILD_TIMEOUT_S, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{tree} {kind} {size}: {out.stderr[-2000:]}")
    rate, cpu, where = json.loads(out.stdout.strip().splitlines()[-1])
    if not where.startswith(str(tree)):
        raise RuntimeError(f"the client meant to run {tree} imported {where}")
    return float(rate), float(cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--before", type=Path, required=True)
    ap.add_argument("--after", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--rows", default=",".join(f"{k}:{n}" for k, n in ROWS),
                    help="which rows, as kind:size,... (kinds: runs, singles)")
    args = ap.parse_args()
    # A terminated run still stops its bookies and ZooKeeper (the context managers below).
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(1))
    rows = [(kind, int(size)) for kind, size in (r.split(":") for r in args.rows.split(","))]
    if any(kind not in ("runs", "singles") for kind, _ in rows):
        ap.error(f"--rows: kinds are runs and singles, not {args.rows!r}")
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    got: dict[tuple[str, str, int], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="ab-runs-") as tmp, LocalZooKeeper(Path(tmp) / "zk") as zk, \
            LocalCluster(3, metadata_uri=zk.uri("/ab-runs"), work_dir=Path(tmp) / "cluster") as cluster:
        for r in range(max(args.rounds, 1)):
            order = ("before", "after") if r % 2 == 0 else ("after", "before")
            for kind, size in rows:
                line = []
                for name in order:
                    rate, cpu = measure(trees[name], cluster.metadata_uri, kind, size, args.entries)
                    got.setdefault((name, kind, size), []).append((rate, cpu))
                    line.append(f"{name} {rate:>9,.0f}/s {cpu:5.2f} us")
                print(f"round {r} {kind:<7} {size:>5}B  " + "  ".join(line) + f"  load {os.getloadavg()[0]:.1f}",
                      flush=True)
    print("\nmedians (acked/s, client CPU us/entry), after/before:")
    for kind, size in rows:
        b = got[("before", kind, size)]
        a = got[("after", kind, size)]
        br, bc = statistics.median(x[0] for x in b), statistics.median(x[1] for x in b)
        ar, ac = statistics.median(x[0] for x in a), statistics.median(x[1] for x in a)
        print(f"{kind:<7} {size:>5}B  before {br:>9,.0f}/s {bc:5.2f} us  after {ar:>9,.0f}/s {ac:5.2f} us  "
              f"rate x{ar / br:.2f}  CPU x{ac / bc:.2f}")


if __name__ == "__main__":
    main()
