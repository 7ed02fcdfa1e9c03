"""Bookies close idle add connections (--idle-connection-timeout-s, issue 31 item 3); a writer
that adds about once per time-out must keep its ensemble and lose nothing.

Three real bookies with a 1 s idle time-out; one writer (E=W=3, A=3, so a single failed bookie
would force an ensemble change) adds with gaps of 0.8-1.6 s, around the time-out, so that some
adds find their connection already closed and some cross the close on the wire (the client
resends those once on a new connection). Afterwards: one fragment (no ensemble change), every
entry reads back, and the bookies' logs show the idle closes happened.
"""

from __future__ import annotations

import logging
import random
import time
from pathlib import Path

import pytest

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.local_cluster import LocalCluster

IDLE_TIMEOUT_S = 1.0
ADDS = 14
SEED = 31


def test_a_writer_adding_once_per_idle_timeout_keeps_its_ensemble(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    rng = random.Random(SEED)
    print(f"seed={SEED}")
    caplog.set_level(logging.INFO, logger="pyspark_ledger.transport.add_streams")
    args = ["--idle-connection-timeout-s", str(IDLE_TIMEOUT_S)]
    with LocalCluster(3, work_dir=tmp_path / "cluster", bookie_args=args) as cluster:
        with LedgerClient(cluster.metadata_uri, add_timeout_s=30) as client:
            w = client.create_ledger(3, 3, 3)
            before = list(client.ledger_metadata(w.ledger_id).segments[-1].bookies)
            for i in range(ADDS):
                time.sleep(IDLE_TIMEOUT_S * rng.uniform(0.8, 1.6))
                assert w.add_entry(b"entry %d" % i) == i
            meta = client.ledger_metadata(w.ledger_id)
            assert len(meta.segments) == 1 and list(meta.segments[0].bookies) == before, meta
            w.close()
            got = [e.payload for e in client.open_ledger(w.ledger_id).read_entries(0, ADDS - 1)]
            assert got == [b"entry %d" % i for i in range(ADDS)]
        idle_closes = sum(b.log_path.read_text(errors="replace").count("reason=idle for") for b in cluster.bookies)
    resent = sum("resending adds on a new connection" in r.getMessage() for r in caplog.records)
    print(f"idle closes on the bookies={idle_closes} adds resent by the client={resent}")
    assert idle_closes >= ADDS  # most gaps were longer than the time-out, on each of three bookies
