"""What operators see: `ledger listbookies` states with since-when (down too), `ledger
listunderreplicated` (marks, lost bookies, claims), the service's Prometheus metrics, and
`ledger decommissionbookie` (moves every fragment, then says the bookie may leave). Real bookies,
real ZooKeeper, the CLI's main; the services run in-process."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest

from pyspark_ledger.autorecovery.service import AutorecoveryService, AutorecoverySettings
from pyspark_ledger.cli import main
from pyspark_ledger.client import LedgerClient
from tests.autorecovery.cluster_shape import (
    check_every_copy,
    start_cluster,
    wait_fully_replicated,
    write_ledgers,
    zk_uri_with_short_sessions,
)


def run(capsys: pytest.CaptureFixture[str], uri: str, *args: str) -> tuple[int, str]:
    code = main(["--metadata-uri", uri, *args])
    out, err = capsys.readouterr()
    assert "\r" not in out and "it/s" not in out  # no progress bar in the output
    return code, out


def wait_until(check, what: str, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"never happened within {timeout_s:g} s: {what}"
        time.sleep(0.2)


def metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ")]
    assert values, f"{name} not exported"
    return values[0]


def test_listbookies_listunderreplicated_metrics_and_decommission(capsys: pytest.CaptureFixture[str], zk_uri: str,
                                                                  tmp_path: Path) -> None:
    uri = zk_uri_with_short_sessions(zk_uri)
    cluster = start_cluster(uri, tmp_path / "cluster")
    auditor_client, worker_client = LedgerClient(uri), LedgerClient(uri, add_timeout_s=30)
    auditor = AutorecoveryService(auditor_client.context, AutorecoverySettings(lost_bookie_grace_s=3, workers=0))
    workers = AutorecoveryService(worker_client.context, AutorecoverySettings(workers=2, auditor=False))
    try:
        written = write_ledgers(uri, 16, mib_every=8, open_every=1000)
        auditor_port, workers_port = auditor.metrics.serve(0), workers.metrics.serve(0)
        auditor.start()
        code, out = run(capsys, uri, "listbookies", "--json")
        assert code == 0 and {b["state"] for b in json.loads(out)} == {"up"} and all(b["sinceMs"] for b in json.loads(out))
        lost = cluster.bookies[4]
        lost.kill()
        down = wait_until(lambda: [b for b in json.loads(run(capsys, uri, "listbookies", "--json")[1])
                                   if b["state"] == "down" and b["sinceMs"]], "the killed bookie listed down since")
        assert [b["bookieId"] for b in down] == [lost.bookie_id] and down[0]["sinceMs"]
        on_lost = {lid for lid in written.entries if lost.bookie_id in worker_client.ledger_metadata(lid).bookies()}
        rows = wait_until(lambda: (r := json.loads(run(capsys, uri, "listunderreplicated", "--json")[1]))
                          and len(r) == len(on_lost) and r, "every ledger on the lost bookie marked")
        assert {r["qualifiedName"] for r in rows} == {lid.qualified_name for lid in on_lost}
        assert all(r["lostBookies"] == [lost.bookie_id] and r["claimedBy"] is None for r in rows)
        assert metric(auditor_port, "autorecovery_auditor_leader") == 1
        code, out = run(capsys, uri, "listunderreplicated")
        assert code == 0 and f"{len(on_lost)} under-replicated ledger(s)" in out and "waiting" in out
        workers.start()
        wait_fully_replicated(worker_client, written, {lost.bookie_id}, timeout_s=90)
        assert metric(workers_port, "autorecovery_rereplicated_ledgers_total") == len(on_lost)
        assert metric(workers_port, "autorecovery_rereplicated_bytes_total") > 0
        leaving = cluster.bookies[3].bookie_id
        code, out = run(capsys, uri, "decommissionbookie", leaving, "--timeout-s", "90", "--json")
        result = json.loads(out)
        assert code == 0 and result["done"] and result["marked"] > 0, out
        assert not any(leaving in worker_client.ledger_metadata(lid).bookies() for lid in written.entries)
        check_every_copy(worker_client, written)
        code, out = run(capsys, uri, "listbookies")
        assert code == 0 and "down" in out and lost.bookie_id in out
    finally:
        workers.stop()
        auditor.stop()
        worker_client.close()
        auditor_client.close()
        cluster.close()
