"""A log writer process killed (kill -9) with large entries in flight, a few acknowledged:
14 x 1 MiB and 600 x 10 KB, and 3,100 x 100 B batched messages (500 acknowledged in batches
first, then batches in flight and one open at the kill), E3 W3 A2, all bookies but one SIGSTOPped
while the burst is sent (pyspark_ledger.testing.takeover explains the method). A new writer
takes over (fences and recovers the previous ledger) and appends; every acknowledged message
reads back intact, once, in order, and `ledger logs read` gives the same messages at the same
positions. No timing assertion here: bench/takeover_bench.py measures the time to take over."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest

from pyspark_ledger.cli.app import main
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.fault_check import FaultCounters
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.testing.takeover import run_takeover
from tests.faults.harness import ROUNDS, report


# The batched case's last 100 messages sit in a batch still open at the kill (a 60 s linger).
@pytest.mark.parametrize("count,size,acked_first", [(14, 2**20, 3), (600, 10_000, 3), (3100, 100, 500)],
                         ids=["14x1MiB", "600x10KB", "3100x100B-batched"])
def test_new_writer_takes_over_from_a_writer_killed_with_entries_in_flight(
        zk_uri: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], count: int, size: int,
        acked_first: int) -> None:
    started = time.monotonic()
    with LocalCluster(3, metadata_uri=zk_uri, work_dir=tmp_path / "cluster") as cluster, \
            LedgerClient(zk_uri) as client:
        rows: dict[str, FaultCounters] = {}
        assert client.cluster_settings.message_batches  # on by default: the writer process batches
        for i in range(ROUNDS):
            r = run_takeover(client, cluster.bookies, f"takeover-{i}", count=count, size=size,
                             acked_first=acked_first, linger_ms=60_000 if size < 1000 else 1)
            assert r.sent, "the writer did not send its burst before the kill"
            assert r.acked[:acked_first] == list(range(acked_first)), r.acked
            assert r.old_in_log >= len(r.acked)
            assert not r.counters.violations(), r.counters
            assert r.counters.acked == len(r.acked) + 1  # the old writer's acks and the new writer's append
            rows.setdefault(f"takeover-{count}x{size}", FaultCounters()).add(r.counters)
            assert shell_read(capsys, zk_uri, f"takeover-{i}") == r.messages
            print(f"round {i}: old writer acked {len(r.acked)}, {r.old_in_log} of its entries in the log "
                  f"({r.old_in_log - len(r.acked)} unacknowledged ones recovered)")
    report(f"writer killed with {count} x {size} B in flight, new writer takes over", rows, started)


def shell_read(capsys: pytest.CaptureFixture[str], uri: str, log_name: str) -> list[tuple[tuple[int, int, int], bytes]]:
    """The log's messages as `ledger logs read --json` prints them."""
    capsys.readouterr()
    assert main(["--metadata-uri", uri, "logs", "read", log_name, "--limit", "100000", "--json"]) == 0
    return [((m["seq"], m["entry"], m["index"]), base64.b64decode(m["payloadBase64"]))
            for m in json.loads(capsys.readouterr().out)]
