"""TLS against plaintext, same run: 1 KiB adds, E3 W3 A2, one client, three real bookies each way.

Two clusters run side by side (plaintext, and mutual TLS with test certificates from
pyspark_ledger.testing.certs), on the same metadata kind, and are measured in alternating
rounds (plaintext first in odd rounds, TLS first in even ones) so that disk writeback and CPU
noise fall on both alike. Throughput: pipelined async adds (client_bench.throughput); latency:
one add at a time (client_bench.latency). Prints each round and the medians; the target is TLS
throughput >= 70% of plaintext.

    python bench/tls_bench.py [--entries 20000] [--latency-adds 1000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from client_bench import latency, throughput
from machine_speed import machine_speed_line

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.local_cluster import LocalCluster

SIZE = 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--entries", type=int, default=20_000)
    ap.add_argument("--latency-adds", type=int, default=1_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    results: dict[str, list[tuple[float, float]]] = {"plaintext": [], "mutual TLS": []}
    with tempfile.TemporaryDirectory(prefix="tls-bench-") as tmp:
        with LocalCluster(3, work_dir=Path(tmp) / "plain") as plain, \
                LocalCluster(3, work_dir=Path(tmp) / "tls", tls_client_auth=True) as tls:
            with LedgerClient(plain.metadata_uri) as plain_client, \
                    LedgerClient(tls.metadata_uri, **tls.client_tls) as tls_client:
                clients = [("plaintext", plain_client), ("mutual TLS", tls_client)]
                for r in range(args.rounds):
                    for name, client in clients if r % 2 == 0 else clients[::-1]:
                        p50, _ = latency(client, SIZE, args.latency_adds)
                        rate = throughput(client, SIZE, args.entries)
                        results[name].append((rate, p50))
                        print(f"round {r + 1} {name:<10}: {rate:>8,.0f} adds/s  p50 {p50:.3f} ms", flush=True)
    print()
    print(machine_speed_line())
    print(f"1 KiB E3/W3/A2, {args.entries} pipelined adds and {args.latency_adds} one-at-a-time adds per round, "
          f"medians of {args.rounds} alternating rounds:")
    med = {name: (statistics.median(r for r, _ in rows), statistics.median(p for _, p in rows))
           for name, rows in results.items()}
    for name, (rate, p50) in med.items():
        print(f"  {name:<10}: {rate:>8,.0f} adds/s ({rate * SIZE / 1e6:.1f} MB/s)  p50 {p50:.3f} ms")
    ratio = med["mutual TLS"][0] / med["plaintext"][0]
    print(f"  TLS throughput = {ratio:.0%} of plaintext (target >= 70%); "
          f"p50 +{med['mutual TLS'][1] - med['plaintext'][1]:.3f} ms")


if __name__ == "__main__":
    main()
