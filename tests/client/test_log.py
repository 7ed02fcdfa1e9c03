"""Named logs: racing writers, crashes during rollover, tailing across rollovers, crash-safe trims."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from metadata import LedgerId, LedgerState, MetadataUnavailableError, NoSuchLedgerError
from metadata.log_record import LogRecord
from pyspark_ledger.autorecovery.auditor import NOT_IN_ITS_LOG, Auditor
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.log import LogFencedError, LogWriter, Position, choose_trim
from pyspark_ledger.testing.local_cluster import LocalCluster
from tests.client import log_workers

REPO = Path(__file__).resolve().parents[2]
RACE_ROUNDS = 50


def test_position_order_and_json() -> None:
    a, b, c = Position(1, 9, LedgerId(0, 5)), Position(2, 0, LedgerId(0, 3)), Position(2, 1, LedgerId(0, 3))
    assert a < b < c and sorted([c, a, b]) == [a, b, c]
    assert Position.from_json(b.to_json()) == b
    assert Position.from_json(f'{{"seq": 2, "ledger": "{LedgerId(0, 3).qualified_name}", "entry": 1}}') == c
    with pytest.raises(ValueError, match="not a log position"):
        Position.from_json({"seq": 1})


def test_choose_trim_takes_a_sealed_prefix_only() -> None:
    rec = LogRecord("t")
    for i in range(5):
        rec = rec.with_ledger(LedgerId(0, i + 1), ctime_ms=1000 * i)
    for i in range(4):
        rec = rec.with_sealed(LedgerId(0, i + 1), 10, 100)
    before = Position(2, 3, LedgerId(0, 3))
    assert choose_trim(rec, before=before, max_age_ms=None, max_size_bytes=None) == {LedgerId(0, 1), LedgerId(0, 2)}
    assert choose_trim(rec, before=None, max_age_ms=1500, max_size_bytes=None, now=3000) == set()  # sealed just now
    # Each ledger was sealed at its own wall-clock time (a loaded machine crosses milliseconds).
    last_sealed = max(lg.sealed_ms or 0 for lg in rec.ledgers[:4])
    assert choose_trim(rec, before=None, max_age_ms=1500, max_size_bytes=None,
                       now=last_sealed + 1501) == {LedgerId(0, 1), LedgerId(0, 2), LedgerId(0, 3), LedgerId(0, 4)}
    assert choose_trim(rec, before=None, max_age_ms=None, max_size_bytes=250) == {LedgerId(0, 1), LedgerId(0, 2)}
    # Never the last (current) ledger, even if everything is old.
    assert LedgerId(0, 5) not in choose_trim(rec, before=Position(9, 0, LedgerId(0, 9)), max_age_ms=0, max_size_bytes=0,
                                             now=10**9)


def test_two_writer_processes_race_fifty_rounds(cluster3: LocalCluster) -> None:
    ctx = multiprocessing.get_context("spawn")
    pipes, procs = [], []
    for wname in ("A", "B"):
        parent, child = ctx.Pipe()
        p = ctx.Process(target=log_workers.race_worker, args=(cluster3.metadata_uri, "raced", wname, child))
        p.start()
        pipes.append(parent)
        procs.append(p)
    all_acked: list[bytes] = []
    try:
        for rnd in range(RACE_ROUNDS):
            for conn in pipes:
                conn.send(str(rnd))
            reports = []
            for conn in pipes:
                assert conn.poll(120), f"round {rnd}: a worker did not answer"
                reports.append(conn.recv())
            # The last writer to open took the log over: it must carry on. Every earlier writer
            # must have had its last acknowledgement before that open (fenced from then on, or
            # already done: when the two windows did not overlap, both proceed).
            opened = sorted((r for r in reports if r[1] is not None), key=lambda r: r[1])
            summary = [(r[1] is not None, len(r[2]), r[3], r[4]) for r in reports]
            assert opened, f"round {rnd}: no writer opened: {summary}"
            winner = opened[-1]
            assert winner[3], f"round {rnd}: the last writer to open did not carry on: {summary}"
            for loser in opened[:-1]:
                late = [p for p, t in loser[2] if t > winner[1]]
                assert not late, f"round {rnd}: a writer got acknowledgements after a later writer opened: {late[:3]}"
            for r in reports:
                all_acked.extend(p for p, _ in r[2])
    finally:
        for conn in pipes:
            conn.send("stop")
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    with LedgerClient(cluster3.metadata_uri) as client:
        client.open_log_writer("raced").close()  # recover whatever the last winner left open
        content = [e.payload for e in client.open_log_reader("raced").read()]
    assert len(content) == len(set(content)), "an append appears twice"
    position = {p: i for i, p in enumerate(content)}
    missing = [p for p in all_acked if p not in position]
    assert not missing, f"acknowledged appends missing from the log: {missing[:5]}"
    for writer in ("A", "B"):
        mine = [p for p in all_acked if p.startswith(writer.encode())]
        assert [position[p] for p in mine] == sorted(position[p] for p in mine), "a writer's appends are out of order"


@pytest.mark.parametrize("step", ["before_create", "after_create", "before_cas", "after_cas", "before_close", "after_close"])
def test_writer_killed_at_each_rollover_step(cluster3: LocalCluster, step: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.client.log_workers", cluster3.metadata_uri, "crashy", step, "7"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert f"CRASH {step}" in proc.stdout
    acked = {int(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("ACK")}
    assert len(acked) == 7
    with LedgerClient(cluster3.metadata_uri) as client:
        w = client.open_log_writer("crashy")
        w.append(b"after recovery")
        w.close()
        rec = client.describe_log("crashy")
        for lg in rec.ledgers:
            meta = client.ledger_metadata(lg.ledger_id)
            assert meta.state is LedgerState.CLOSED and lg.entry_count == meta.last_entry_id + 1
        content = [e.payload for e in client.open_log_reader("crashy").read()]
        assert content == [b"entry-%d" % i for i in range(len(content) - 1)] + [b"after recovery"]
        assert set(range(7)) <= {int(p.split(b"-")[1]) for p in content[:-1]}
        # A ledger the log does not reference is a leak, except the one a writer killed between
        # creating its next ledger and adding it to the log left behind: it holds no entry.
        leaked = leaked_ledgers(client, "crashy", killed_before_adding=step in ("after_create", "before_cas"))
        assert not leaked, f"ledgers leaked by the writer killed at {step}: {leaked}"
        # The one ledger allowed above is not left for good: the orphan auditor names it.
        in_log = {lg.ledger_id for lg in rec.ledgers}
        leftover = [lid for lid in client.list_ledgers() if lid not in in_log]
        found = Auditor(client.context, grace_period_s=0, scan_rate_per_s=10_000).audit_once()
        assert [(o.ledger_id, o.reason) for o in found] == [(lid, NOT_IN_ITS_LOG) for lid in leftover]


def leaked_ledgers(client: LedgerClient, name: str, *, killed_before_adding: bool) -> list[str]:
    """Ledgers that exist but that the log does not reference, each with why it counts as a leak.
    With `killed_before_adding`, the one ledger a writer killed between creating its next ledger
    and adding it to the log is allowed: of this log, following a ledger of the log, and empty
    (the killed process could not delete it; nothing was acknowledged in it)."""
    rec = client.describe_log(name)
    in_log = {lg.ledger_id for lg in rec.ledgers}
    outside = sorted(lid for lid in client.list_ledgers() if lid not in in_log)
    leaks: list[str] = []
    for lid in outside:
        meta = client.ledger_metadata(lid)
        ctx = meta.create_context
        allowed = (
            killed_before_adding and len(outside) == 1 and ctx is not None and ctx.data_set == f"log:{name}"
            and ctx.follows_ledger in in_log and client.open_ledger(lid).last_add_confirmed() == -1
        )
        if not allowed:
            leaks.append(f"{lid} ({meta.state.value}, data set {ctx.data_set if ctx else None})")
    return leaks


def test_leak_check_catches_a_planted_leak(client: LedgerClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The leak check must be able to fail: plant a writer that forgets to delete a ledger the log
    never referenced (its compare-and-set failed before applying) and the check names that ledger."""
    real_cas = client.logs.compare_and_set_head  # the writer commits on the head view
    failed_adds: list[LedgerId] = []

    def cas_failing_the_second_add(record: LogRecord, expected_version: int, **kw: Any) -> int:
        if record.next_seq == 2 and not failed_adds:  # the first rollover's add, not applied
            failed_adds.append(record.ledgers[-1].ledger_id)
            raise MetadataUnavailableError("injected: metadata service unreachable")
        return real_cas(record, expected_version, **kw)

    monkeypatch.setattr(client.logs, "compare_and_set_head", cas_failing_the_second_add)
    monkeypatch.setattr(LogWriter, "_discard", lambda self, handle: handle._close_quietly())  # the planted leak
    w = client.open_log_writer("leaky", rollover_entries=2)
    for i in range(2):
        w.append(b"x-%d" % i)
    with pytest.raises(MetadataUnavailableError):
        w.append(b"x-2")
    w.append(b"x-2")
    w.close()
    assert len(failed_adds) == 1
    leaked = leaked_ledgers(client, "leaky", killed_before_adding=False)
    assert len(leaked) == 1 and leaked[0].startswith(f"{failed_adds[0]} (OPEN"), leaked
    monkeypatch.undo()  # the product's own _discard: the same failure leaks nothing
    client.delete_log("leaky")
    client.delete_ledger(failed_adds[0])
    w = client.open_log_writer("tight", rollover_entries=2)
    monkeypatch.setattr(client.logs, "compare_and_set_head", cas_failing_the_second_add)
    failed_adds.clear()
    for i in range(2):
        w.append(b"y-%d" % i)
    with pytest.raises(MetadataUnavailableError):
        w.append(b"y-2")
    w.close()
    assert len(failed_adds) == 1 and leaked_ledgers(client, "tight", killed_before_adding=False) == []


def test_tailing_reader_across_five_rollovers(cluster3: LocalCluster) -> None:
    with LedgerClient(cluster3.metadata_uri) as client:
        w = client.open_log_writer("tailed", rollover_entries=20)
        reader = client.open_log_reader("tailed")
        seen: list[bytes] = []
        t = threading.Thread(target=lambda: seen.extend(e.payload for e in reader.tail(idle_timeout_s=3)))
        t.start()
        for i in range(110):
            w.append(b"t-%d" % i)
        t.join(timeout=60)
        assert seen == [b"t-%d" % i for i in range(110)]
        assert len(client.describe_log("tailed").ledgers) >= 6
        w.close()


@pytest.mark.parametrize("step", ["after_cas", "after_delete"])
def test_trim_crash_between_steps_leaks_nothing(cluster3: LocalCluster, step: str) -> None:
    class Crash(Exception):
        pass

    def crash_at(name: str):
        def hook(s: str) -> None:
            if s == name:
                raise Crash(s)
        return hook

    with LedgerClient(cluster3.metadata_uri) as client:
        w = client.open_log_writer("trimmed", rollover_entries=5)
        positions = [w.append(b"x-%d" % i) for i in range(30)]
        with pytest.raises(Crash):
            client.trim_log("trimmed", before=positions[22], crash_hook=crash_at(step))
        rec = client.describe_log("trimmed")
        assert rec.pending_deletions, "the removed ledgers must be recorded before they are deleted"
        client.trim_log("trimmed")  # the next pass finishes the job
        rec = client.describe_log("trimmed")
        assert not rec.pending_deletions
        in_log = {lg.ledger_id for lg in rec.ledgers}
        assert set(client.list_ledgers()) == in_log, "a ledger is neither in the log nor deleted"
        w.close()  # so that the last entry is readable (not only up to the LAC)
        content = [e.payload for e in client.open_log_reader("trimmed").read()]
        assert content[0] == b"x-20" and content[-1] == b"x-29"


def test_old_writer_is_fenced_and_list_describe(cluster3: LocalCluster) -> None:
    with LedgerClient(cluster3.metadata_uri) as client:
        w1 = client.open_log_writer("fenced")
        w1.append(b"one")
        w2 = client.open_log_writer("fenced")
        with pytest.raises(LogFencedError):
            w1.append(b"two", timeout_s=30)
        w2.append(b"three")
        w2.close()
        assert "fenced" in client.list_logs()
        rec = client.describe_log("fenced")
        assert rec.writer_epoch == 2 and len(rec.ledgers) == 2
        assert [e.payload for e in client.open_log_reader("fenced").read()] == [b"one", b"three"]
        client.delete_log("fenced")
        assert "fenced" not in client.list_logs()
        with pytest.raises(NoSuchLedgerError):
            client.ledger_metadata(rec.ledgers[0].ledger_id)
