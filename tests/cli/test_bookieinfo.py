"""`ledger bookieinfo` and `ledger triggergc` against in-process bookie servers (real gRPC, an
embedded metadata store), and the storage metrics they share (bookie/admin.py): the real
garbage collector deletes a ledger metadata does not have, and a stand-in GC checks every
figure bookieinfo, triggergc and the metrics report."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bookie.config import BookieConfig
from bookie.server import BookieServer
from bookie.status import Status
from pyspark_ledger.cli import main
from pyspark_ledger.testing.zookeeper_server import free_port
from pyspark_ledger.transport.bookie_client import BookieClient
from tests.bookie.server_helpers import add_sync

LEDGER = (3, 1)
WRITTEN = 2 * 2**20


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[str, list[BookieServer]]]:
    uri = f"sqlite://{tmp_path / 'meta.db'}"
    started: list[BookieServer] = []
    try:
        for name in ("b1", "b2"):
            cfg = BookieConfig(metadata_uri=uri, data_dir=tmp_path / name, port=free_port(), disk_check_interval_s=3600.0,
                               verify_ledger_keys=False)
            started.append(BookieServer(cfg).start())
        yield uri, started
    finally:
        for s in started:
            s.stop()


def run(capsys: pytest.CaptureFixture[str], uri: str, *args: str) -> tuple[int, str, str]:
    code = main(["--metadata-uri", uri, *args])
    out, err = capsys.readouterr()
    return code, out, err


def write(server: BookieServer, nbytes: int) -> None:
    conn = BookieClient(server.bookie_id, f"{server.cfg.host}:{server.port}", rpc_timeout_s=20.0)
    try:
        chunk = 256 * 1024
        batch = [(e, e - 1, bytes([e % 251]) * chunk) for e in range(nbytes // chunk)]
        assert add_sync(conn, LEDGER, batch)[0] == Status.OK
    finally:
        conn.close()


class StandInGc:
    """The methods bookie/admin.py reads from a storage that has a garbage collector."""

    def __init__(self) -> None:
        self.runs = 0
        self.figures: dict[str, Any] = {"live_bytes": 3000, "dead_bytes": 1000, "entry_log_count": 4}

    def gc_stats(self) -> dict[str, Any]:
        return dict(self.figures)

    def run_gc_now(self, progress: Callable[[str, int, int], None]) -> dict[str, Any]:
        for phase in ("gc", "compaction"):
            for i in range(1, 4):
                progress(phase, i, 3)
        self.runs += 1
        self.figures.update(dead_bytes=0, last_gc_unix_s=1_700_000_000.0, last_compaction_unix_s=1_700_000_001.0,
                            reclaimed_bytes_total=1000, compaction_runs_total=self.runs)
        return {"reclaimed_bytes": 1000}


def test_bookieinfo_reports_each_directory_and_triggergc_runs_the_real_gc(
        capsys: pytest.CaptureFixture[str], servers: tuple[str, list[BookieServer]]) -> None:
    uri, (b1, b2) = servers
    write(b1, WRITTEN)  # a ledger metadata never had: the bookie's GC deletes it
    code, out, _ = run(capsys, uri, "--json", "bookieinfo")
    assert code == 0
    reports = {r["bookieId"]: r for r in json.loads(out)}
    assert set(reports) == {b1.bookie_id, b2.bookie_id}
    r1 = reports[b1.bookie_id]
    dirs = {d["role"]: d for d in r1["directories"]}
    assert set(dirs) == {"ledgers", "journal"}
    assert dirs["ledgers"]["path"] == str(b1.cfg.data_dir)
    assert dirs["ledgers"]["capacityBytes"] == shutil.disk_usage(b1.cfg.data_dir).total
    assert dirs["ledgers"]["storedBytes"] >= WRITTEN  # the entry logs hold what was written
    assert dirs["journal"]["storedBytes"] >= WRITTEN  # and so does the journal (not checkpointed yet)
    assert reports[b2.bookie_id]["directories"][0]["storedBytes"] < WRITTEN
    assert r1["readOnly"] is False and r1["journalFailed"] is False and r1["entryLogCount"] >= 1
    assert r1["gcAvailable"] is True and dirs["ledgers"]["liveBytes"] >= WRITTEN
    code, out, _ = run(capsys, uri, "bookieinfo", b1.bookie_id)
    assert code == 0 and b1.bookie_id in out and b2.bookie_id not in out
    code, _, err = run(capsys, uri, "bookieinfo", "nosuch:1")
    assert code == 1 and "not registered" in err
    assert LEDGER in b1.storage.ledgers()
    code, out, _ = run(capsys, uri, "triggergc", b1.bookie_id)
    assert code == 0, out
    assert LEDGER not in b1.storage.ledgers() or b1.storage.ledger_state(LEDGER) is None
    code, out, _ = run(capsys, uri, "--json", "bookieinfo", b1.bookie_id)
    [after] = json.loads(out)
    ledgers_dir = {d["role"]: d for d in after["directories"]}["ledgers"]
    assert ledgers_dir["liveBytes"] == 0 and after["lastGcUnixS"] is not None


def test_triggergc_runs_the_storage_gc_and_bookieinfo_and_metrics_show_its_figures(
        capsys: pytest.CaptureFixture[str], servers: tuple[str, list[BookieServer]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    uri, (b1, _b2) = servers
    gc = StandInGc()
    monkeypatch.setattr(b1.storage, "gc_stats", gc.gc_stats, raising=False)
    monkeypatch.setattr(b1.storage, "run_gc_now", gc.run_gc_now, raising=False)
    page = b1.metrics.render()
    assert "bookie_gc_reclaimed_bytes_total" not in page and "bookie_entry_log_live_fraction 0.75" in page

    code, out, _ = run(capsys, uri, "--json", "triggergc", b1.bookie_id)
    assert code == 0 and gc.runs == 1
    assert json.loads(out) == {"bookieId": b1.bookie_id, "ok": True, "status": "OK", "message": "",
                               "reclaimedBytes": 1000}
    code, out, _ = run(capsys, uri, "--json", "bookieinfo", b1.bookie_id)
    [r] = json.loads(out)
    ledgers = [d for d in r["directories"] if d["role"] == "ledgers"][0]
    assert (ledgers["liveBytes"], ledgers["deadBytes"]) == (3000, 0)
    assert (r["lastGcUnixS"], r["lastCompactionUnixS"], r["reclaimedBytes"], r["compactionRuns"]) == (
        1_700_000_000.0, 1_700_000_001.0, 1000, 1)
    assert r["gcAvailable"] is True and r["entryLogCount"] == 4

    page = b1.metrics.render()
    for line in ("# TYPE bookie_gc_reclaimed_bytes_total counter", "bookie_gc_reclaimed_bytes_total 1000.0",
                 "bookie_compaction_runs_total 1.0", "bookie_entry_log_count 4.0", "bookie_entry_log_live_fraction 1.0",
                 "bookie_journal_failed 0.0", "bookie_journal_reopens_total 0.0", "bookie_read_only 0.0"):
        assert line in page.splitlines(), line
    capacity = float(shutil.disk_usage(b1.cfg.data_dir).total)
    capacities = {(s.labels["dir"], s.labels["role"]): s.value for family in text_string_to_metric_families(page)
                  if family.name == "bookie_directory_capacity_bytes" for s in family.samples}
    assert capacities[(str(b1.cfg.data_dir), "ledgers")] == capacity
    assert 'role="journal"' in page and "bookie_directory_used_bytes{" in page


def test_with_no_bookie_running_the_shell_says_so_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """bookieinfo used to print an empty table and exit 0; commands that need bookies named each
    bookie of each write set. With none registered: one line, exit 1. A failure that is not
    about bookies keeps its own message."""
    from pyspark_ledger.cli.no_bookies import NO_BOOKIE_RUNNING

    uri = f"sqlite://{tmp_path / 'meta.db'}"
    for args in (["bookieinfo"], ["bookieinfo", "--json"], ["simpletest", "-n", "3"], ["bookiesanity"]):
        code, out, err = run(capsys, uri, *args)
        assert (code, out, err.splitlines()[-1]) == (1, "", f"ledger {args[0]}: {NO_BOOKIE_RUNNING}"), args
    code, _, err = run(capsys, uri, "ledgermetadata", "999")
    assert code == 1 and "no such ledger 999" in err
