"""Acceptance of the always-on autorecovery (issue 20, item 1): 5 real bookies on a real
ZooKeeper, ledgers of small and 1 MiB entries (some left OPEN by a dead writer), two
`ledger autorecovery` processes with the default settings but a 3 s grace. kill -9 a bookie:
with no operator command every fragment is back to W copies (metadata, and each copy read from
each bookie of its write set); kill -9 a second bookie: every entry still reads back exactly.

Size: LEDGER_AUTORECOVERY_LEDGERS (default 60 in CI; 200 is the issue's shape, bench/autorecovery_bench.py)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from metadata.ephemeral_lock import read_lock
from metadata.paths import AUDITOR_ELECTION
from pyspark_ledger.autorecovery.audit_scan import read_cursor
from pyspark_ledger.client import LedgerClient
from tests.autorecovery.cluster_shape import (
    Autorecovery,
    check_every_copy,
    check_every_entry,
    start_cluster,
    wait_fully_replicated,
    write_ledgers,
    zk_uri_with_short_sessions,
)

LEDGERS = int(os.environ.get("LEDGER_AUTORECOVERY_LEDGERS", "60"))  # the shape: 200


def test_two_bookies_killed_one_after_the_other_lose_nothing(zk_uri: str, tmp_path: Path) -> None:
    uri = zk_uri_with_short_sessions(zk_uri)
    cluster = start_cluster(uri, tmp_path / "cluster")
    services = []
    try:
        written = write_ledgers(uri, LEDGERS)
        services = [Autorecovery(uri, tmp_path / f"autorecovery-{i}.log") for i in range(2)]
        first, second = cluster.bookies[0], cluster.bookies[1]
        first.kill()
        with LedgerClient(uri, add_timeout_s=30) as client:
            wait_fully_replicated(client, written, {first.bookie_id})
            assert check_every_copy(client, written) == sum(2 * len(d) for d in written.entries.values())
        second.kill()
        with LedgerClient(uri, add_timeout_s=30) as client:
            wait_fully_replicated(client, written, {first.bookie_id, second.bookie_id})
            check_every_entry(client, written)
        for s in services:
            assert s.stop() == 0, s.log()[-3000:]
        assert "elected autorecovery auditor" in "".join(s.log() for s in services)
    finally:
        for s in services:
            s.kill()
        cluster.close()


def test_an_auditor_that_never_marks_fails_the_check(zk_uri: str, tmp_path: Path) -> None:
    """The planted bug (tests/autorecovery/planted_autorecovery.py): nothing is re-replicated, and
    the very check the acceptance test relies on says so (the real service passes it in ~8 s)."""
    uri = zk_uri_with_short_sessions(zk_uri)
    cluster = start_cluster(uri, tmp_path / "cluster", bookies=4)
    service = None
    try:
        written = write_ledgers(uri, 6, mib_every=3, open_every=100)
        service = Autorecovery(uri, tmp_path / "planted.log", planted=True)
        cluster.bookies[0].kill()
        with LedgerClient(uri, add_timeout_s=30) as client:
            with pytest.raises(AssertionError, match="not re-replicated"):
                wait_fully_replicated(client, written, {cluster.bookies[0].bookie_id}, timeout_s=12)
        assert service.stop() == 0
    finally:
        if service is not None:
            service.kill()
        cluster.close()


def test_auditor_killed_mid_scan_another_takes_over_and_finishes(zk_uri: str, tmp_path: Path) -> None:
    """A slow scan (30 ledgers/s), the elected auditor killed -9 once its cursor has moved: the
    other process is elected when the dead one's session expires, resumes from the cursor, and
    every fragment is re-replicated."""
    uri = zk_uri_with_short_sessions(zk_uri)
    cluster = start_cluster(uri, tmp_path / "cluster")
    services: list[Autorecovery] = []
    try:
        written = write_ledgers(uri, 110, mib_every=1000, open_every=1000)  # > CURSOR_EVERY_LEDGERS
        first = Autorecovery(uri, tmp_path / "first.log", "--scan-rate", "30")
        services.append(first)
        with LedgerClient(uri) as client:
            wait_for(lambda: (read_lock(client.store, AUDITOR_ELECTION) or {}).get("holder", "").split(":")[1:2]
                     == [str(first.proc.pid)], "the first process elected")
            second = Autorecovery(uri, tmp_path / "second.log", "--scan-rate", "30")
            services.append(second)
            cluster.bookies[0].kill()
            wait_for(lambda: (c := read_cursor(client.store)) is not None and c.after is not None,
                     "the scan cursor moved")
            first.kill()
            wait_fully_replicated(client, written, {cluster.bookies[0].bookie_id})
        assert "elected autorecovery auditor" in second.log()
        resumed = [line for line in second.log().splitlines() if "resuming the audit scan" in line]
        assert resumed and "after=None" not in resumed[0], second.log()[-3000:]
    finally:
        for s in services:
            s.kill()
        cluster.close()


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"never happened within {timeout_s:g} s: {what}"
        time.sleep(0.1)
