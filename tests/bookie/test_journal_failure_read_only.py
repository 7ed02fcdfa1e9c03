"""A bookie whose journal fails (fdatasync answers ENOSPC) turns read-only where it matters: in its
registration, so no new ensemble picks it, and in its answers to adds; it keeps serving reads.
Two in-process bookie servers on one embedded metadata store; the failure is injected into the
journal files of one of them only."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bookie.config import BookieConfig
from bookie.server import BookieServer
from bookie.status import Status
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.zookeeper_server import free_port
from pyspark_ledger.transport.bookie_client import BookieClient
from tests.bookie.server_helpers import add_sync, read_all

LEDGER = (0, 7)
NEW_LEDGERS = 5


class JournalDiskFull:
    """os.fdatasync, but ENOSPC for the journal files under one data directory once armed."""

    def __init__(self, data_dir: Path):
        self.journal_dir = str(data_dir.resolve() / "journal") + os.sep
        self.real = os.fdatasync
        self.armed = False
        self.failures = 0

    def __call__(self, fd: int) -> None:
        if self.armed and os.readlink(f"/proc/self/fd/{fd}").startswith(self.journal_dir):
            self.failures += 1
            raise OSError(errno.ENOSPC, "injected: no space left on the journal's device")
        self.real(fd)


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[BookieServer, BookieServer, str]]:
    uri = f"sqlite://{tmp_path / 'meta.db'}"
    started: list[BookieServer] = []
    try:
        for name in ("sick", "healthy"):
            cfg = BookieConfig(metadata_uri=uri, data_dir=tmp_path / name, port=free_port(), verify_ledger_keys=False,
                               disk_check_interval_s=3600.0)
            started.append(BookieServer(cfg).start())
        yield started[0], started[1], uri
    finally:
        for s in started:
            s.stop()


def entries(ids: range) -> list[tuple[int, int, bytes]]:
    return [(e, e - 1, b"entry %d" % e) for e in ids]


def test_a_failed_journal_makes_the_bookie_read_only_for_new_ensembles_and_adds_but_not_reads(
        servers: tuple[BookieServer, BookieServer, str], monkeypatch: pytest.MonkeyPatch) -> None:
    sick, healthy, uri = servers
    disk_full = JournalDiskFull(sick.cfg.data_dir)
    monkeypatch.setattr(os, "fdatasync", disk_full)
    conn = BookieClient(sick.bookie_id, f"{sick.cfg.host}:{sick.port}", rpc_timeout_s=10.0)
    with LedgerClient(uri) as client:
        try:
            assert sorted(client.pool.writable()) == sorted([sick.bookie_id, healthy.bookie_id])
            assert add_sync(conn, LEDGER, entries(range(0, 5)))[0] == Status.OK

            disk_full.armed = True
            assert add_sync(conn, LEDGER, entries(range(5, 6)))[0] != Status.OK  # the add that met the failure
            assert disk_full.failures >= 1, "the injected fdatasync failure did not happen"

            registered = {b.bookie_id: b.read_only for b in client.bookies()}
            assert registered == {sick.bookie_id: True, healthy.bookie_id: False}
            assert client.pool.writable() == [healthy.bookie_id]
            for _ in range(NEW_LEDGERS):
                w = client.create_ledger(1, 1, 1)
                assert w.metadata.segments[0].bookies == (healthy.bookie_id,)
                w.close()
            assert add_sync(conn, LEDGER, entries(range(5, 6)))[0] == Status.READ_ONLY
            assert add_sync(conn, LEDGER, entries(range(5, 6)), recovery=True)[0] == Status.READ_ONLY
            got = read_all(conn, LEDGER, 0, 4)
            assert {e: got[e] for e in range(5)} == {e: (Status.OK, b"entry %d" % e) for e in range(5)}

            # The disk monitor seeing a full disk, then room again, does not make it writable.
            sick._set_read_only(True)  # the disk monitor's callback
            sick._set_read_only(False)
            assert {b.bookie_id: b.read_only for b in client.bookies()}[sick.bookie_id] is True
            assert add_sync(conn, LEDGER, entries(range(5, 6)))[0] == Status.READ_ONLY
        finally:
            conn.close()
