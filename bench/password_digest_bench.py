"""Ledger creation rate and opening 400 ledgers, with the password digest of each code tree (issue
31, item 7: PBKDF2 with a salt per ledger against the old fixed-salt SHA-256), in one run.

For each tree given (a checkout of this repository), in turns, a child process with that tree
first on its path starts a ZooKeeper and one bookie, creates --ledgers ledgers with a password
(create_ledger, one add, close), then opens every one of them with the password (each ledger has
its own salt, so each open derives a key once: nothing is cached from the creation). Prints one
line per tree and round, and the medians.

    python bench/password_digest_bench.py --trees /work/main /work/wt-security [--ledgers 400] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUN_TIMEOUT_S = 600


def measure(ledgers: int) -> dict[str, float]:
    """In the child: the figures of the tree on sys.path."""
    from pyspark_ledger.client import LedgerClient
    from pyspark_ledger.testing.local_cluster import LocalCluster
    from pyspark_ledger.testing.zookeeper_server import LocalZooKeeper

    with tempfile.TemporaryDirectory() as d:
        zk = LocalZooKeeper(Path(d) / "zk")
        zk.start()
        try:
            uri = zk.uri("/bench")
            with LocalCluster(1, metadata_uri=uri, work_dir=Path(d) / "cluster") as cluster, \
                    LedgerClient(cluster.metadata_uri) as client:
                start = time.perf_counter()
                only_create = [client.create_ledger(1, 1, 1, password="bench-pw") for _ in range(ledgers)]
                create_s = time.perf_counter() - start
                for w in only_create:
                    w.close()
                start = time.perf_counter()
                ids = []
                for _ in range(ledgers):
                    w = client.create_ledger(1, 1, 1, password="bench-pw")
                    w.add_entry(b"x")
                    w.close()
                    ids.append(w.ledger_id)
                create_add_close_s = time.perf_counter() - start
                start = time.perf_counter()
                for lid in ids:
                    client.open_ledger(lid, password="bench-pw")
                open_s = time.perf_counter() - start
                start = time.perf_counter()
                for lid in ids:
                    client.open_ledger(lid, password="bench-pw")
                reopen_s = time.perf_counter() - start
        finally:
            zk.stop()
    return {"create_per_s": ledgers / create_s, "create_add_close_per_s": ledgers / create_add_close_s,
            "open_all_s": open_s, "reopen_all_s": reopen_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trees", nargs="+", type=Path, default=[Path(__file__).resolve().parents[1]])
    parser.add_argument("--ledgers", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.ledgers)))
        return
    results: dict[Path, list[dict[str, float]]] = {tree: [] for tree in args.trees}
    for round_no in range(args.rounds):
        for tree in args.trees:
            env = {**os.environ, "PYTHONPATH": str(tree)}
            out = subprocess.run([sys.executable, __file__, "--child", "--ledgers", str(args.ledgers)], env=env,
                                 cwd=tree, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=True).stdout
            figures = json.loads(out.strip().splitlines()[-1])
            results[tree].append(figures)
            print(f"round {round_no} {tree}: " + " ".join(f"{k}={v:.3f}" for k, v in figures.items()), flush=True)
    for tree, runs in results.items():
        medians = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(f"median {tree}: " + " ".join(f"{k}={v:.3f}" for k, v in medians.items()))


if __name__ == "__main__":
    main()
