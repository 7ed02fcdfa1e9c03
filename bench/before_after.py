"""Unbatched adds, this tree against another (a `git worktree` of the code before a change), in
alternating rounds on one cluster: each round runs a child process with the other tree first on
PYTHONPATH, so both measure the same bookies, disk and hour. Medians and their ratio.

    git worktree add --detach /tmp/before main
    python bench/before_after.py --before /tmp/before [--rounds 5] [--entries 20000] [--size 1024]

Rows: WriteHandle adds (E3 W3 A2, pipelined) and LogWriter appends with one message per entry
(batching=False here; the default of a tree without batches); with --kinds batched, a batched
LogWriter's plain messages (bench/log_writer_rows.py's produce; both trees must batch), with
stamped / varying its messages with an event time and a constant header / a header value of
their own (issue 32), e.g.
    python bench/before_after.py --before /tmp/stamps-before --kinds batched,stamped,varying --size 100 --entries 200000
Each round runs every kind of both trees (the kinds in turn, the trees alternating), so the ratio
of two kinds is also one of the same rounds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

CHILD = r"""
import sys, time
from collections import deque
sys.path[:0] = [sys.argv[5]]
import bookie, metadata, pyspark_ledger  # from the tree measured, before client_bench puts its own tree first
sys.path.insert(0, {bench!r})
from client_bench import throughput
from pyspark_ledger.client import LedgerClient
uri, size, total, kind = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
cpu0 = time.process_time()
with LedgerClient(uri) as client:
    if kind == "handle":
        rate = throughput(client, size, total)
    elif kind in ("batched", "stamped", "varying"):  # an event time and one header (log_writer_rows.py)
        from log_writer_rows import produce
        cpu0 = time.process_time()  # the messages' CPU only: a child's start costs more than 1 us a message here
        rate = produce(client, size, total, True, stamped={{"batched": False, "stamped": True}}.get(kind, kind))
    else:
        import inspect
        kw = {{"batching": False}} if "batching" in inspect.signature(client.open_log_writer).parameters else {{}}
        w = client.open_log_writer(f"ab-{{time.monotonic_ns()}}", **kw)
        window, payload = deque(), b"p" * size
        start = time.perf_counter()
        for _ in range(total):
            if len(window) >= 5000:
                window.popleft().result(timeout=60)
            window.append(w.append_async(payload))
        for f in window:
            f.result(timeout=60)
        rate = total / (time.perf_counter() - start)
        w.close()
print(rate, (time.process_time() - cpu0) / total * 1e6, pyspark_ledger.__file__)
"""


def measure(tree: Path, uri: str, size: int, total: int, kind: str) -> tuple[float, float]:
    """(adds/s, client CPU µs per add including the client's start) of one child run."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", CHILD.format(bench=str(HERE)), uri, str(size), str(total), kind,
                          str(tree)], env=env, cwd=tree, capture_output=True, text=True, timeout=900, check=True)
    rate, cpu_us, where = out.stdout.strip().splitlines()[-1].split()
    if not where.startswith(str(tree) + os.sep):  # client_bench puts its own tree first on sys.path
        raise RuntimeError(f"the child meant to run {tree} imported {where}")
    return float(rate), float(cpu_us)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--before", type=Path, required=True, help="the other tree (e.g. a worktree of main)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--entries", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--kinds", default="handle,log",
                    help="comma-separated: handle, log (unbatched), batched, stamped (batched with an event time and a header)")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from pyspark_ledger.testing.local_cluster import LocalCluster
    from pyspark_ledger.testing.zookeeper_server import LocalZooKeeper

    trees = {"before": args.before.resolve(), "after": REPO}
    with tempfile.TemporaryDirectory(prefix="before-after-") as tmp, LocalZooKeeper(Path(tmp) / "zk") as zk, \
            LocalCluster(3, metadata_uri=zk.uri("/ab"), work_dir=Path(tmp) / "cluster") as cluster:
        if "batched" in args.kinds or "stamped" in args.kinds:
            from pyspark_ledger.client import LedgerClient
            from pyspark_ledger.testing.message_batches import set_message_batches
            with LedgerClient(cluster.metadata_uri) as client:
                set_message_batches(client, True)
        kinds = args.kinds.split(",")
        got: dict[tuple[str, str], list[tuple[float, float]]] = {(k, n): [] for k in kinds for n in trees}
        for r in range(args.rounds):
            order = ("before", "after") if r % 2 == 0 else ("after", "before")
            for kind in kinds[r % len(kinds):] + kinds[:r % len(kinds)]:
                for name in order:
                    got[kind, name].append(measure(trees[name], cluster.metadata_uri, args.size, args.entries, kind))
            print(f"round {r + 1} done, load {os.getloadavg()[0]:.1f}", flush=True)
        for kind in kinds:
            b, a = (statistics.median(x for x, _ in got[kind, n]) for n in ("before", "after"))
            bc, ac = (statistics.median(c for _, c in got[kind, n]) for n in ("before", "after"))
            how = {"batched": "batched", "stamped": "batched, event time + 1 header",
                   "varying": "batched, event time + a header value of its own"}.get(kind, "unbatched")
            print(f"{kind:>7} {args.size} B E3W3A2 {how}, medians of {args.rounds} alternating rounds: "
                  f"before {b:,.0f}/s, after {a:,.0f}/s, after/before {a / b:.3f}; client CPU per add "
                  f"before {bc:.2f} us, after {ac:.2f} us, after/before {ac / bc:.3f} "
                  f"(rates before {[round(x) for x, _ in got[kind, 'before']]}, "
                  f"after {[round(x) for x, _ in got[kind, 'after']]})")
        for base in ("batched",) if "batched" in kinds else ():
            for kind in (k for k in kinds if k in ("stamped", "varying")):
                for n in ("before", "after"):
                    p = statistics.median(x for x, _ in got[base, n])
                    s = statistics.median(x for x, _ in got[kind, n])
                    pc = statistics.median(c for _, c in got[base, n])
                    sc = statistics.median(c for _, c in got[kind, n])
                    print(f"{n:>6}: {kind} {100 * (1 - s / p):.1f}% below plain in rate, client CPU "
                          f"{100 * (sc / pc - 1):+.1f}%")

if __name__ == "__main__":
    main()
