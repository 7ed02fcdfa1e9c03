"""Rack-aware placement with real processes (issue 29 item 3, acceptance): 6 real bookies in 3
racks on a real ZooKeeper, a `ledger autorecovery` process.

Rack r2 goes down. Best effort (min_racks_per_write_quorum=3, not enforced), ledgers are
created on the two racks left; one of them stays OPEN with its writer alive. With enforcement
on, creating a ledger fails naming the racks. r2 comes back: one auditor scan marks every
misplaced CLOSED ledger, autorecovery moves the copies (each entry then read from each bookie of
its write set), and the OPEN ledger is never touched: its writer keeps writing."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from metadata.cluster_settings import update_cluster_settings
from metadata.underreplication import UnderReplicationManager
from pyspark_ledger.autorecovery.placement_scan import RackView, misplaced_ledgers
from pyspark_ledger.cli import main
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.errors import NotEnoughRacksError
from pyspark_ledger.ledger.write_handle import WriteHandle
from pyspark_ledger.protocol.placement import RackRules, rack_spread
from pyspark_ledger.testing.local_cluster import LocalCluster
from tests.autorecovery.cluster_shape import Autorecovery, Written, check_every_copy, payload, zk_uri_with_short_sessions

RACK_OF = {i: f"r{i // 2}" for i in range(6)}  # bookie index -> rack: two bookies per rack
MISPLACED_LEDGERS = 6
WAIT_S = 150.0
T = TypeVar("T")


def wait_for(what: str, check: Callable[[], T], timeout_s: float = WAIT_S) -> T:
    start = time.monotonic()
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"not within {timeout_s:g} s: {what}")
        time.sleep(0.2)


def start_racked_cluster(uri: str, work_dir: Path) -> LocalCluster:
    cluster = LocalCluster(0, metadata_uri=uri, work_dir=work_dir, bookie_id_prefix="bookie-")
    bookies = [cluster.add_bookie(start=False, extra_args=["--rack", RACK_OF[i]]) for i in range(6)]
    for b in bookies:
        b.start(wait=False)
    try:
        for b in bookies:
            b.wait_serving()
    except BaseException:
        cluster.close()
        raise
    return cluster


def write(client: LedgerClient, index: int, written: Written, close: bool = True) -> WriteHandle:
    w = client.create_ledger(3, 3, 2)
    data = [payload(index, e, 200 + 50 * e) for e in range(6)]
    for p in data:
        w.add_entry(p)
    if close:
        w.close()
    written.entries[w.ledger_id] = data
    return w


def run_cli(capsys: pytest.CaptureFixture[str], uri: str, *args: str) -> tuple[int, str, str]:
    code = main(["--metadata-uri", uri, *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_rack_down_enforced_create_fails_then_autorecovery_spreads_the_copies(
        capsys: pytest.CaptureFixture[str], zk_uri: str, tmp_path: Path) -> None:
    uri = zk_uri_with_short_sessions(zk_uri)
    cluster = start_racked_cluster(uri, tmp_path / "cluster")
    service = None
    try:
        code, out, _ = run_cli(capsys, uri, "listbookies", "--json")
        assert code == 0 and {r["bookieId"]: r["rack"] for r in json.loads(out)} == {
            f"bookie-{i}": RACK_OF[i] for i in range(6)}
        service = Autorecovery(uri, tmp_path / "autorecovery.log", "--lost-bookie-grace-s", "600")
        with LedgerClient(uri, add_timeout_s=30) as client:
            update_cluster_settings(client.store, {"min_racks_per_write_quorum": 3})
            wait_for("the auditor watching racks", lambda: "placement watched writable_racks=r0,r1,r2" in service.log())
            written = Written()
            spread = write(client, 0, written)  # placed while every rack is up: 3 racks, never moved
            assert rack_spread([RACK_OF[int(b[-1])] for b in client.ledger_metadata(spread.ledger_id).bookies()], 3) == 3

            for b in cluster.bookies[4:]:  # rack r2 goes down
                b.stop()
            wait_for("r2 gone from the registry", lambda: not {"bookie-4", "bookie-5"} & set(client.pool.writable()))
            wait_for("the auditor seeing r2 down", lambda: "racks without a writable bookie racks=r2" in service.log())
            for i in range(1, MISPLACED_LEDGERS + 1):  # best effort: two racks
                write(client, i, written)
            open_writer = write(client, 100, written, close=False)
            code, out, _ = run_cli(capsys, uri, "placementcheck", "--json")
            report = json.loads(out)
            assert code == 1 and report["writableRacks"] == ["r0", "r1"]
            assert len(report["misplaced"]) == MISPLACED_LEDGERS + 1  # the open one breaks the rule too

            update_cluster_settings(client.store, {"enforce_min_racks": True})
            wait_for("the client seeing enforcement", lambda: client.cluster_settings.enforce_min_racks)
            with pytest.raises(NotEnoughRacksError) as err:
                client.create_ledger(3, 3, 2)
            assert "needs bookies in 3 racks" in str(err.value)
            assert "r0 (2), r1 (2)" in str(err.value) and "no writable bookie in r2" in str(err.value)
            # A client started now never saw r2's bookies: it names the racks it can see.
            code, _, err_text = run_cli(capsys, uri, "simpletest", "-n", "1")
            assert code == 1 and "needs bookies in 3 racks (enforce_min_racks)" in err_text and "r0 (2), r1 (2)" in err_text

            before = len(service.log())
            for b in cluster.bookies[4:]:  # r2 comes back
                b.start()
            # One scan marks every misplaced closed ledger (the open one is never marked).
            finished = wait_for("a placement scan", lambda: re.findall(
                r"placement scan finished misplaced=(\d+) marked=(\d+)", service.log()[before:]))
            assert finished[0] == (str(MISPLACED_LEDGERS + 1), str(MISPLACED_LEDGERS))

            def fixed() -> bool:
                view = RackView.of(client.bookies())
                left = [m.ledger_id for m in misplaced_ledgers(client.ledgers, view, RackRules(3, True))]
                return left == [open_writer.ledger_id] and not UnderReplicationManager(client.store).ledger_ids()

            wait_for("autorecovery moving the misplaced copies", fixed)
            after = service.log()[before:]
            assert after.count("marked misplaced ledger=") == MISPLACED_LEDGERS
            assert after.count("under-replicated ledger repaired") == MISPLACED_LEDGERS
            assert len(re.findall("placement scan finished", after)) == 1  # the one scan did it all
            assert check_every_copy(client, written) == 3 * sum(len(d) for d in written.entries.values())

            # The open ledger was never fenced: its writer goes on, and closes it itself.
            assert client.ledger_metadata(open_writer.ledger_id).state.value == "OPEN"
            open_writer.add_entry(b"still the writer")
            open_writer.close()
            assert client.ledger_metadata(open_writer.ledger_id).last_entry_id == 6
        code, out, _ = run_cli(capsys, uri, "placementcheck")
        assert code == 1 and "1 ledger(s) break the rule" in out  # the once-open ledger, now closed, until a scan
        assert service.stop() == 0, service.log()[-3000:]
    finally:
        if service is not None:
            service.kill()
        cluster.close()
