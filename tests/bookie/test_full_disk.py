"""A full disk, end to end, on a small tmpfs the test mounts (root; skipped with the reason where
mounting is not allowed): the bookie turns read-only (its registration too, so writers move away
and new ensembles skip it), keeps serving reads, and once space is freed below the low-water mark
it turns writable again and takes adds with no restart (bookie/writable_again.py); every
acknowledged entry reads back exactly. Also the journal running out of space in the middle of a
write: a restart replays cleanly. In-process bookie servers on an embedded metadata store; the
disk monitor is driven by hand (check_once) so each step happens in a known order."""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bookie.config import BookieConfig
from bookie.server import BookieServer
from bookie.status import Status
from bookie.storage import BookieStorage
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.faults import FaultUnavailable, SmallFilesystem
from pyspark_ledger.testing.zookeeper_server import free_port
from pyspark_ledger.transport.bookie_client import BookieClient
from tests.bookie.server_helpers import add_sync, read_all

FS_BYTES = 64 * 2**20  # > the journal's 16 MiB preallocation, small enough to fill in a blink
LEDGER = (5, 7)  # a scope the client never allocates in: no clash with its ledgers
ENTRY_BYTES = 64 * 1024
NEW_LEDGERS = 5


def payload(ledger: tuple[int, int], entry_id: int, nbytes: int = ENTRY_BYTES) -> bytes:
    head = b"%d-%d-%d:" % (ledger[0], ledger[1], entry_id)
    return head + bytes((entry_id * 7 + i) % 251 for i in range(nbytes - len(head)))


@dataclass
class Cluster:
    uri: str
    fs: SmallFilesystem
    sick_cfg: BookieConfig
    sick: BookieServer
    healthy: list[BookieServer]
    acked: dict[tuple[int, int], dict[int, bytes]] = field(default_factory=dict)

    def conn(self) -> BookieClient:
        return BookieClient(self.sick.bookie_id, f"{self.sick.cfg.host}:{self.sick.port}", rpc_timeout_s=20.0)

    def add(self, conn: BookieClient, ledger: tuple[int, int], ids: range, nbytes: int = ENTRY_BYTES) -> Status:
        batch = [(e, e - 1, payload(ledger, e, nbytes)) for e in ids]
        status, _ = add_sync(conn, ledger, batch)
        if status == Status.OK:
            self.acked.setdefault(ledger, {}).update({e: d for e, _, d in batch})
        return status

    def restart_sick(self) -> None:
        self.sick.stop()
        self.sick = BookieServer(self.sick_cfg).start()

    def assert_acked_read_back(self, conn: BookieClient) -> None:
        """Every entry the sick bookie acknowledged, byte for byte (0 lost)."""
        for ledger, want in self.acked.items():
            got = read_all(conn, ledger, min(want), max(want))
            wrong = [e for e, data in want.items() if got.get(e) != (Status.OK, data)]
            assert not wrong, f"ledger {ledger}: {len(wrong)} of {len(want)} acknowledged entries lost or changed"


def sick_config(uri: str, data_dir: Path, high: float, low: float) -> BookieConfig:
    return BookieConfig(metadata_uri=uri, data_dir=data_dir, port=free_port(), verify_ledger_keys=False,
                        disk_usage_threshold=high,
                        disk_usage_lwm_threshold=low, disk_check_interval_s=3600.0)  # driven by hand


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[object]:
    made: list[Cluster] = []
    fs = SmallFilesystem(tmp_path / "small", FS_BYTES)

    def make(high: float = 0.95, low: float = 0.70, healthy: int = 2) -> Cluster:
        try:
            fs.mount()
        except FaultUnavailable as exc:
            pytest.skip(str(exc))
        uri = f"sqlite://{tmp_path / 'meta.db'}"
        cfg = sick_config(uri, fs.mount_point / "data", high, low)
        c = Cluster(uri, fs, cfg, BookieServer(cfg).start(), [])
        made.append(c)
        for i in range(healthy):
            c.healthy.append(BookieServer(BookieConfig(metadata_uri=uri, data_dir=tmp_path / f"healthy{i}",
                                                       verify_ledger_keys=False,
                                                       port=free_port(), disk_check_interval_s=3600.0)).start())
        return c

    try:
        yield make
    finally:
        for c in made:
            for s in [c.sick, *c.healthy]:
                s.stop()
        fs.unmount()


def registered_read_only(client: LedgerClient, bookie_id: str) -> bool:
    return {b.bookie_id: b.read_only for b in client.bookies()}[bookie_id]


def run_full_disk_round(c: Cluster) -> None:
    """The whole story on one cluster; raises AssertionError at the first step that goes wrong."""
    sick, monitor = c.sick, c.sick.disk_monitor
    assert monitor is not None
    conn = c.conn()
    with LedgerClient(c.uri) as client:
        try:
            assert c.add(conn, LEDGER, range(0, 20)) == Status.OK
            writer = client.create_ledger(2, 2, 2, ensemble=[sick.bookie_id, c.healthy[0].bookie_id])
            written = {writer.add_entry(payload((9, 9), i)): payload((9, 9), i) for i in range(10)}

            # 1. Over the high-water mark (no ENOSPC yet): read-only, then writable again.
            c.fs.fill(leave_bytes=int(FS_BYTES * 0.02))
            assert monitor.check_once() is True and registered_read_only(client, sick.bookie_id)
            assert c.add(conn, LEDGER, range(20, 21)) == Status.READ_ONLY
            c.fs.drain()
            assert monitor.check_once() is False and not registered_read_only(client, sick.bookie_id)
            assert c.add(conn, LEDGER, range(20, 30)) == Status.OK

            # 2. ENOSPC before the monitor notices (an entry-log or journal write fails).
            c.fs.fill(leave_bytes=0)
            failed = c.add(conn, LEDGER, range(30, 62))  # 2 MiB: cannot fit
            assert failed not in (Status.OK, Status.READ_ONLY), failed.name
            assert sick.storage is not None and sick.storage.journal_failed
            assert registered_read_only(client, sick.bookie_id)
            assert sick.bookie_id not in client.pool.writable()
            for i in range(10, 20):  # the writer moves away from the sick bookie
                written[writer.add_entry(payload((9, 9), i))] = payload((9, 9), i)
            assert sick.bookie_id not in writer.metadata.segments[-1].bookies
            for _ in range(NEW_LEDGERS):
                w = client.create_ledger(2, 2, 2)
                assert sick.bookie_id not in w.metadata.segments[0].bookies
                w.close()
            c.assert_acked_read_back(conn)  # reads are served while read-only
            assert monitor.check_once() is True  # still full: stays read-only
            assert c.add(conn, LEDGER, range(30, 31)) == Status.READ_ONLY

            # 3. The operator frees space: writable again and adds accepted, no restart.
            c.fs.drain()
            assert monitor.check_once() is False
            assert not registered_read_only(client, sick.bookie_id)
            got = read_all(conn, LEDGER, 30, 30)
            assert got[30][0] == Status.NO_SUCH_ENTRY, "an entry never acknowledged became visible"
            assert c.add(conn, LEDGER, range(30, 62)) == Status.OK
            again = client.create_ledger(2, 2, 2, ensemble=[sick.bookie_id, c.healthy[1].bookie_id])
            assert again.add_entry(b"after the disk was freed") == 0
            again.close()
            writer.close()
            c.assert_acked_read_back(conn)
            reader = client.open_ledger(writer.ledger_id)
            assert {e.entry_id: e.payload for e in reader.read_entries(0, max(written))} == written
        finally:
            conn.close()
    # 4. A restart replays cleanly and still holds exactly what was acknowledged.
    c.restart_sick()
    conn = c.conn()
    try:
        c.assert_acked_read_back(conn)
    finally:
        conn.close()


def test_full_disk_read_only_then_writable_again_without_restart(cluster_factory) -> None:
    run_full_disk_round(cluster_factory())


def test_the_round_catches_a_bookie_republished_writable_without_reopening_its_journal(
        cluster_factory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted bug: the writable-again step says yes without reopening the journal (the bookie
    advertises itself writable and then refuses every add, the bug of issue 18)."""
    monkeypatch.setattr(BookieStorage, "reopen_journal", lambda self: True)
    with pytest.raises(AssertionError):
        run_full_disk_round(cluster_factory())


def test_journal_out_of_space_mid_write_restart_replays_cleanly(cluster_factory) -> None:
    c = cluster_factory(high=1.0, low=0.5, healthy=0)
    conn = c.conn()
    try:
        assert c.add(conn, LEDGER, range(0, 20)) == Status.OK
        c.restart_sick()  # a new journal file, preallocated while there is room
    finally:
        conn.close()
    c.sick.stop()
    c.fs.fill(leave_bytes=256 * 1024)  # the next journal cannot preallocate: writes meet ENOSPC
    c.sick = BookieServer(c.sick_cfg).start()
    conn = c.conn()
    try:
        assert c.add(conn, LEDGER, range(20, 21), nbytes=4096) == Status.OK
        assert c.add(conn, LEDGER, range(21, 37)) not in (Status.OK,)  # 1 MiB: torn in the journal
        assert c.sick.storage is not None and c.sick.storage.journal_failed
    finally:
        conn.close()
    c.fs.drain()
    c.restart_sick()
    conn = c.conn()
    try:
        c.assert_acked_read_back(conn)
        assert read_all(conn, LEDGER, 21, 21)[21][0] == Status.NO_SUCH_ENTRY
        assert c.add(conn, LEDGER, range(21, 37)) == Status.OK
        c.assert_acked_read_back(conn)
    finally:
        conn.close()


def test_a_failed_fdatasync_tail_is_not_replayed_after_the_journal_is_reopened(
        cluster_factory, monkeypatch: pytest.MonkeyPatch) -> None:
    """fdatasync says ENOSPC after the write reached the page cache: the record sits in the failed
    file but was never acknowledged. Once reopened (and after a restart) it must not appear."""
    c = cluster_factory(healthy=0)
    journal_dir = str((c.sick_cfg.data_dir / "journal").resolve()) + os.sep
    real, armed = os.fdatasync, [False]

    def fdatasync(fd: int) -> None:
        if armed[0] and os.readlink(f"/proc/self/fd/{fd}").startswith(journal_dir):
            raise OSError(errno.ENOSPC, "injected: no space left on the journal's device")
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    conn = c.conn()
    try:
        assert c.add(conn, LEDGER, range(0, 10)) == Status.OK
        armed[0] = True
        assert c.add(conn, LEDGER, range(10, 11)) != Status.OK
        assert c.sick.disk_monitor is not None and c.sick.disk_monitor.check_once() is True  # the probe fails too
        armed[0] = False
        assert c.sick.disk_monitor.check_once() is False
        assert read_all(conn, LEDGER, 10, 10)[10][0] == Status.NO_SUCH_ENTRY
    finally:
        conn.close()
    c.restart_sick()
    conn = c.conn()
    try:
        assert read_all(conn, LEDGER, 10, 10)[10][0] == Status.NO_SUCH_ENTRY, "the failed journal tail was replayed"
        c.assert_acked_read_back(conn)
    finally:
        conn.close()


def wait_until(predicate, what: str, timeout_s: float = 30.0) -> None:
    """Bounded wait for the monitor thread (a correctness bound, not a timing assertion)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.05)


def test_the_monitor_thread_alone_brings_the_bookie_back(tmp_path: Path) -> None:
    """No hand-driven checks: the disk monitor's own thread (every 0.1 s) sees the journal failure
    as a full disk and, once the ballast is gone, reopens the journal and republishes writable."""
    fs = SmallFilesystem(tmp_path / "small", FS_BYTES)
    try:
        fs.mount()
    except FaultUnavailable as exc:
        pytest.skip(str(exc))
    uri = f"sqlite://{tmp_path / 'meta.db'}"
    cfg = BookieConfig(metadata_uri=uri, data_dir=fs.mount_point / "data", port=free_port(), verify_ledger_keys=False,
                       disk_usage_threshold=1.0, disk_usage_lwm_threshold=0.7, disk_check_interval_s=0.1)
    server = BookieServer(cfg).start()
    c = Cluster(uri, fs, cfg, server, [])
    conn = c.conn()
    try:
        with LedgerClient(uri) as client:
            assert c.add(conn, LEDGER, range(0, 10)) == Status.OK
            fs.fill(leave_bytes=16 * 1024)  # under 100%: only ENOSPC, not the monitor, can turn it read-only
            status = c.add(conn, LEDGER, range(10, 42))
            assert status not in (Status.OK, Status.READ_ONLY), status.name
            wait_until(lambda: registered_read_only(client, server.bookie_id), "registration read-only")
            fs.drain()
            wait_until(lambda: not registered_read_only(client, server.bookie_id), "registration writable again")
            assert c.add(conn, LEDGER, range(10, 42)) == Status.OK
            assert server.writable_again is not None and server.writable_again.reopened == 1
            c.assert_acked_read_back(conn)
    finally:
        conn.close()
        server.stop()
        fs.unmount()
