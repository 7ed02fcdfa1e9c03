"""The cost of authorization on reads, same run: one-entry reads (1 KiB) from a mutual-TLS bookie
without read authorization, and from one with --require-read-auth, the reads carrying the
ledger's master key (checked in constant time against the stored key) or the operator secret
(gRPC metadata added by a client interceptor on every call). One real bookie each, measured in
alternating rounds; prints each round and the medians (reads/s, p50).

    python bench/auth_bench.py [--reads 3000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import hashlib
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine_speed import machine_speed_line

from bookie.proto import bookie_pb2 as pb
from bookie.status import Status
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.transport.bookie_client import BookieClient
from pyspark_ledger.transport.tls import TlsSettings

ENTRIES = 1000
SIZE = 1024
KEY = hashlib.sha256(b"ledger" + b"bench password").digest()
SECRET = b"bench-operator-secret-0123456789"
LEDGER = (0, 1)


def _fill(client: BookieClient) -> None:
    done: list[Status] = []
    for first in range(0, ENTRIES, 100):
        batch = [(e, e - 1, bytes([e % 256]) * SIZE) for e in range(first, first + 100)]
        client.add_batch(LEDGER, KEY, batch, lambda s, m: done.append(s), timeout_s=30)
    deadline = time.monotonic() + 60
    while len(done) < ENTRIES // 100 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert done == [Status.OK] * (ENTRIES // 100), done


def _reads(client: BookieClient, n: int, key: bytes, seed: int) -> tuple[float, float]:
    rnd = random.Random(seed)
    lat = []
    started = time.perf_counter()
    for _ in range(n):
        e = rnd.randrange(ENTRIES)
        t = time.perf_counter()
        resp: pb.ReadResponse = client.read(LEDGER, e, e, master_key=key)
        lat.append(time.perf_counter() - t)
        assert resp.status == Status.OK and len(resp.entries) == 1
    return n / (time.perf_counter() - started), statistics.median(lat) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reads", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    results: dict[str, list[tuple[float, float]]] = {"no read auth": [], "master key": [], "operator secret": []}
    with tempfile.TemporaryDirectory(prefix="auth-bench-") as tmp:
        secret_file = Path(tmp) / "operator.secret"
        secret_file.write_bytes(SECRET)
        secret_file.chmod(0o600)
        with LocalCluster(1, work_dir=Path(tmp) / "open", tls_client_auth=True,
                          bookie_args=["--no-verify-ledger-keys"]) as open_c, \
                LocalCluster(1, work_dir=Path(tmp) / "auth", tls_client_auth=True,
                             bookie_args=["--require-read-auth", "--operator-secret-file", str(secret_file),
                                          "--no-verify-ledger-keys"]) as auth_c:
            def client(c: LocalCluster, secret: bytes | None) -> BookieClient:
                b = c.bookies[0]
                tls = TlsSettings.from_values(c.client_tls["tls_ca"], c.client_tls["tls_cert"], c.client_tls["tls_key"])
                return BookieClient(b.bookie_id, b.address, tls=tls, operator_secret=secret)

            clients = {"no read auth": (client(open_c, None), b""), "master key": (client(auth_c, None), KEY),
                       "operator secret": (client(auth_c, SECRET), b"")}
            _fill(clients["no read auth"][0])
            _fill(clients["master key"][0])
            order = list(clients)
            for r in range(args.rounds):
                for name in order if r % 2 == 0 else order[::-1]:
                    c, key = clients[name]
                    rate, p50 = _reads(c, args.reads, key, seed=r)
                    results[name].append((rate, p50))
                    print(f"round {r + 1} {name:<16}: {rate:>8,.0f} reads/s  p50 {p50:.3f} ms", flush=True)
            for c, _ in clients.values():
                c.close()
    print()
    print(machine_speed_line())
    print(f"one-entry 1 KiB reads over mutual TLS, {args.reads} per round, medians of {args.rounds} rounds:")
    base = statistics.median(r for r, _ in results["no read auth"])
    for name, rows in results.items():
        rate, p50 = statistics.median(r for r, _ in rows), statistics.median(p for _, p in rows)
        print(f"  {name:<16}: {rate:>8,.0f} reads/s ({rate / base:.0%})  p50 {p50:.3f} ms")


if __name__ == "__main__":
    main()
