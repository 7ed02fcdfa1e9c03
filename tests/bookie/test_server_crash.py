"""Acceptance: kill -9 a bookie during a sustained add stream; everything it acknowledged survives.

Seeded: each run prints its seed; replay one with LEDGER_TEST_SEED=<seed>."""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

import pytest

from bookie.status import Status
from pyspark_ledger.testing.local_cluster import LocalBookie
from pyspark_ledger.transport.bookie_client import BookieClient
from tests.bookie.server_helpers import KEY, Acks, add_sync, read_all

RUNS = 20
SEEDS = [int(os.environ["LEDGER_TEST_SEED"])] if "LEDGER_TEST_SEED" in os.environ else list(range(1000, 1000 + RUNS))
STREAM_SECONDS_MAX = 1.0


def payload(seed: int, ledger: int, entry_id: int) -> bytes:
    rng = random.Random(seed * 1_000_003 + ledger * 7919 + entry_id)
    return rng.randbytes(rng.choice([1, 10, 100, 1000, 4000]))


@pytest.mark.parametrize("seed", SEEDS)
def test_kill9_during_add_stream_loses_nothing_acknowledged(seed: int, tmp_path: Path) -> None:
    print(f"seed={seed} (replay: LEDGER_TEST_SEED={seed})")
    rng = random.Random(seed)
    uri = f"sqlite://{tmp_path / 'meta.db'}"
    bookie = LocalBookie(uri, tmp_path / "data", extra_args=["--checkpoint-interval-s", str(rng.choice([0.2, 1, 60])),
                                                               "--no-verify-ledger-keys"]).start()
    client = BookieClient(bookie.bookie_id, bookie.address, add_timeout_s=5)
    acks = Acks()
    ledgers = [(0, 1), (7, 2**64 - 1)]
    next_id = {lg: 0 for lg in ledgers}
    stop = threading.Event()
    sent = [0]

    def producer() -> None:
        deadline = time.monotonic() + STREAM_SECONDS_MAX + 1
        while not stop.is_set() and time.monotonic() < deadline:
            lg = rng.choice(ledgers)
            n = rng.randint(1, 40)
            entries = [(e, e - 1, payload(seed, lg[1], e)) for e in range(next_id[lg], next_id[lg] + n)]
            next_id[lg] += n
            try:
                client.add_batch(lg, KEY, entries, acks.callback([(lg, e[0], e[2]) for e in entries]))
                sent[0] += 1
            except Exception:  # noqa: BLE001 - the bookie is being killed
                return
            if sent[0] % 20 == 0:
                time.sleep(0.001)

    t = threading.Thread(target=producer)
    t.start()
    time.sleep(rng.uniform(0.05, STREAM_SECONDS_MAX))
    bookie.kill()
    stop.set()
    t.join(timeout=10)
    client.close()
    acked = [item for batch in acks.ok for item in batch]
    print(f"batches sent={sent[0]} acknowledged entries={len(acked)}")

    bookie.start()
    client = BookieClient(bookie.bookie_id, bookie.address)
    try:
        for lg in ledgers:
            mine = {eid: data for (l2, eid, data) in acked if l2 == lg}
            if not mine:
                continue
            got = read_all(client, lg, 0, max(mine))
            for eid, data in mine.items():
                status, stored = got[eid]
                assert status == Status.OK, f"acknowledged entry {lg}/{eid} answered {status.name} (seed {seed})"
                assert stored == data, f"acknowledged entry {lg}/{eid} changed (seed {seed})"
        # The restarted bookie still takes writes.
        assert add_sync(client, (0, 99), [(0, -1, b"after restart")]) == (Status.OK, "")
    finally:
        client.close()
        bookie.stop()
