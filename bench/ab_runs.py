"""Run rows of two source trees side by side (bench/run_rows.py's measurements): one cluster,
clients of tree A and tree B in alternating rounds (each round in the other order), medians.

    python bench/ab_runs.py --before /tmp/tree-before --after . [--rounds 5] [--entries 100000]

Each measurement is a fresh client process whose PYTHONPATH is that tree, against the same
three bookies (started from this tree; their code is not what is compared). Rows: runs of 256
(add_entries_async) at 100 B and 1 KiB, and single adds (add_entry_async) at 1 KiB; each gives
acked entries/s and the client process's CPU time per entry, and beside it the bookies' (all
three together, from /proc), which a client change can move too. Kinds not in the default rows:
`messages`, batched LogWriter messages from one producer (bench/log_writer_rows.py produce;
`--rows messages:1024 --entries 300000` is issue 30's 1 KiB row), and `unbatched`, the same with
batching off. The load average is printed beside every round: on a shared machine compare the
two columns of one run, never runs of two days. With --bookies-per-tree each tree's clients
write to three bookies of that same tree (two clusters, each started with its tree first on
PYTHONPATH): for a change on the bookie's side of the add path."""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from contextlib import ExitStack
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
from log_writer_rows import messages, unbatched
from pyspark_ledger.client import LedgerClient
with LedgerClient({uri!r}) as client:
    rate, cpu = ({kind})(client, {size}, {entries})
import pyspark_ledger
print(json.dumps([rate, cpu, pyspark_ledger.__file__]))
"""
ROWS = (("runs", 100), ("runs", 1024), ("singles", 1024))
TICKS = os.sysconf("SC_CLK_TCK")
CHILD_TIMEOUT_S = 900


def cpu_s(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


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
    ap.add_argument("--bookies-per-tree", action="store_true",
                    help="each tree's clients against bookies of that tree (default: one cluster of this tree)")
    args = ap.parse_args()
    # A terminated run still stops its bookies and ZooKeeper (the context managers below).
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(1))
    rows = [(kind, int(size)) for kind, size in (r.split(":") for r in args.rows.split(","))]
    if any(kind not in ("runs", "singles", "messages", "unbatched") for kind, _ in rows):
        ap.error(f"--rows: kinds are runs, singles, messages and unbatched, not {args.rows!r}")
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    got: dict[tuple[str, str, int], list[tuple[float, float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="ab-runs-") as tmp, LocalZooKeeper(Path(tmp) / "zk") as zk, \
            ExitStack() as stack:
        clusters = {}
        for name in (trees if args.bookies_per_tree else ["after"]):
            # The bookies inherit PYTHONPATH and the working directory (`python -m` puts it first
            # on sys.path): with --bookies-per-tree, both are the tree, so each cluster runs its own.
            saved, cwd = os.environ.get("PYTHONPATH"), os.getcwd()
            if args.bookies_per_tree:
                os.environ["PYTHONPATH"] = str(trees[name])
                os.chdir(trees[name])
            try:
                clusters[name] = stack.enter_context(LocalCluster(3, metadata_uri=zk.uri(f"/ab-runs-{name}"),
                                                                  work_dir=Path(tmp) / f"cluster-{name}"))
            finally:
                os.chdir(cwd)
                if saved is None:
                    os.environ.pop("PYTHONPATH", None)
                else:
                    os.environ["PYTHONPATH"] = saved
            print(f"{name} bookies run from " + ", ".join(sorted({os.readlink(f"/proc/{b.proc.pid}/cwd")
                                                                  for b in clusters[name].bookies if b.proc})))
        for r in range(max(args.rounds, 1)):
            order = ("before", "after") if r % 2 == 0 else ("after", "before")
            for kind, size in rows:
                line = []
                for name in order:
                    cluster = clusters.get(name, clusters["after"])
                    bookies_s = sum(cpu_s(b.proc.pid) for b in cluster.bookies if b.proc is not None)
                    rate, cpu = measure(trees[name], cluster.metadata_uri, kind, size, args.entries)
                    bookies_us = (sum(cpu_s(b.proc.pid) for b in cluster.bookies if b.proc is not None)
                                  - bookies_s) / args.entries * 1e6
                    got.setdefault((name, kind, size), []).append((rate, cpu, bookies_us))
                    line.append(f"{name} {rate:>9,.0f}/s {cpu:5.2f} us (bookies {bookies_us:5.2f} us)")
                print(f"round {r} {kind:<7} {size:>5}B  " + "  ".join(line) + f"  load {os.getloadavg()[0]:.1f}",
                      flush=True)
    print("\nmedians (acked/s, client CPU us/entry, the three bookies' CPU us/entry), after/before:")
    for kind, size in rows:
        b = got[("before", kind, size)]
        a = got[("after", kind, size)]
        br, bc = statistics.median(x[0] for x in b), statistics.median(x[1] for x in b)
        ar, ac = statistics.median(x[0] for x in a), statistics.median(x[1] for x in a)
        bb, ab = statistics.median(x[2] for x in b), statistics.median(x[2] for x in a)
        print(f"{kind:<7} {size:>5}B  before {br:>9,.0f}/s {bc:5.2f} us ({bb:5.2f})  after {ar:>9,.0f}/s {ac:5.2f} us "
              f"({ab:5.2f})  rate x{ar / br:.2f}  CPU x{ac / bc:.2f}  bookies' CPU x{ab / bb:.2f}")


if __name__ == "__main__":
    main()
