"""Property test: seeded random interleavings of adds, reads and bookie failures.

Bookies run in-process (real storage and gRPC on loopback) so that hundreds of steps stay fast.
Invariants: no read ever returns an entry past the reader's LAC; the LAC never goes backwards;
every acknowledged entry is readable, with its bytes, after the writer closes (or after another
client recovers the ledger). Replay a run with LEDGER_TEST_SEED=<seed>.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from bookie.config import BookieConfig
from bookie.server import BookieServer
from metadata import LedgerState
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.errors import LedgerError

SEEDS = [int(os.environ["LEDGER_TEST_SEED"])] if "LEDGER_TEST_SEED" in os.environ else [101, 202, 303, 404, 505]
STEPS = 200
BOOKIES = 5


class InProcessCluster:
    def __init__(self, tmp: Path, n: int):
        self.uri = f"sqlite://{tmp / 'meta.db'}"
        self.tmp = tmp
        self.servers: dict[int, BookieServer | None] = {}
        self.ports: dict[int, int] = {}
        for i in range(n):
            self.start(i)

    def start(self, i: int) -> None:
        cfg = BookieConfig(metadata_uri=self.uri, data_dir=self.tmp / f"b{i}", port=self.ports.get(i, 0),
                           bookie_id=f"bookie-{i}", fsync=False, disk_check_interval_s=3600,
                           shutdown_grace_s=0.1, checkpoint_interval_s=0)
        server = BookieServer(cfg).start()
        self.ports[i] = server.port
        self.servers[i] = server

    def stop(self, i: int) -> None:
        server = self.servers.get(i)
        if server is not None:
            server.stop()
            self.servers[i] = None

    def alive(self) -> list[int]:
        return [i for i, s in self.servers.items() if s is not None]

    def close(self) -> None:
        for i in list(self.servers):
            self.stop(i)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_adds_reads_and_failures(seed: int, tmp_path: Path) -> None:
    print(f"seed={seed} (replay: LEDGER_TEST_SEED={seed})")
    rng = random.Random(seed)
    cluster = InProcessCluster(tmp_path, BOOKIES)
    writer_client = LedgerClient(cluster.uri, add_timeout_s=2, rpc_timeout_s=3)
    reader_client = LedgerClient(cluster.uri, rpc_timeout_s=3)
    try:
        w = writer_client.create_ledger(3, rng.choice([2, 3]), 2)
        written: dict[int, bytes] = {}
        futures = []
        acked: set[int] = set()
        reader = reader_client.open_ledger(w.ledger_id)
        last_lac = -1
        for step in range(STEPS):
            time.sleep(rng.uniform(0, 0.01))  # let failures be noticed between some steps
            op = rng.random()
            if op < 0.55:
                for _ in range(rng.randint(1, 20)):
                    payload = rng.randbytes(rng.randint(0, 300))
                    try:
                        f = w.add_entry_async(payload)
                    except LedgerError:
                        break
                    futures.append((f, payload))
            elif op < 0.8:
                try:
                    lac = reader.last_add_confirmed()
                except LedgerError:
                    continue
                assert lac >= last_lac, f"LAC went backwards {last_lac} -> {lac} (step {step})"
                last_lac = lac
                if lac >= 0:
                    first = rng.randint(0, lac)
                    try:
                        entries = list(reader.read_entries(first, lac))
                    except LedgerError:
                        continue
                    assert all(e.entry_id <= lac for e in entries)
                    for e in entries:
                        written_payload = next(
                            (p for f, p in futures if f.done() and not f.exception() and f.result() == e.entry_id), None)
                        if written_payload is not None:
                            assert e.payload == written_payload
            elif op < 0.9:
                alive = cluster.alive()
                if len(alive) > 3:  # keep enough bookies for an ensemble change or A acks
                    ensemble = {int(b.split("-")[1]) for b in writer_client.ledger_metadata(w.ledger_id).segments[-1].bookies}
                    targets = [i for i in alive if i in ensemble] if rng.random() < 0.7 else alive
                    victim = rng.choice(targets or alive)
                    cluster.stop(victim)
            else:
                dead = [i for i, s in cluster.servers.items() if s is None]
                if dead:
                    cluster.start(rng.choice(dead))
        # The failure phase is over: every bookie comes back before the ledger is sealed.
        for i, server in list(cluster.servers.items()):
            if server is None:
                cluster.start(i)
        for f, payload in futures:
            try:
                eid = f.result(timeout=60)
            except LedgerError:
                continue
            written[eid] = payload
            acked.add(eid)
        if rng.random() < 0.5:
            w.close()
            meta = writer_client.ledger_metadata(w.ledger_id)
        else:
            meta = reader_client.open_ledger(w.ledger_id, recovery=True).metadata
        assert meta.state is LedgerState.CLOSED
        if acked:
            assert meta.last_entry_id >= max(acked)
            entries = {e.entry_id: e.payload for e in reader_client.open_ledger(w.ledger_id).read_entries(0, meta.last_entry_id)}
            for eid in acked:
                assert entries[eid] == written[eid], f"acknowledged entry {eid} lost or changed (seed {seed})"
        print(f"acked={len(acked)} last_entry={meta.last_entry_id} fragments={len(meta.segments)}")
    finally:
        writer_client.close()
        reader_client.close()
        cluster.close()
