"""A journal directory and two ledger directories on real `bookie` processes and a real ZooKeeper
(issue 29 item 4, acceptance):

1. Filling one ledger directory (a small tmpfs, the suite's SmallFilesystem) leaves the bookie
   writable: the writer never moves off it, and every acknowledged entry reads back, from it too.
2. Wiping one ledger directory and restarting: the ledgers that had entries there are marked
   under-replicated for this bookie, its reads of them answer UNKNOWN_ENTRY_STATE (never
   NO_SUCH_ENTRY) meanwhile, and autorecovery restores every copy.
3. kill -9 with the journal on another file system than the entry logs: no acknowledged entry is
   lost, on that bookie itself.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from bookie.status import Status
from metadata import LedgerId
from metadata.underreplication import REASON_LOST_DIRECTORY, UnderReplicationManager
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.faults import FaultUnavailable, SmallFilesystem
from pyspark_ledger.testing.local_cluster import LocalBookie, LocalCluster
from pyspark_ledger.transport.bookie_client import BookieClient
from tests.autorecovery.cluster_shape import Autorecovery, Written, check_every_copy, zk_uri_with_short_sessions

FS_BYTES = 64 * 2**20
ENTRY_BYTES = 16 * 1024
WAIT_S = 120.0
# Entry logs roll at 1 MiB, so a few MiB of writes spread over both ledger directories.
DIR_ARGS = ["--entry-log-size-mb", "1", "--disk-check-interval-s", "0.2"]


def wait_until(predicate: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.2)


def payload(tag: int, i: int, size: int = ENTRY_BYTES) -> bytes:
    head = b"%d-%d:" % (tag, i)
    return head + bytes((i * 7 + tag + k) % 251 for k in range(size - len(head)))


def dir_args(journal: Path, ledger_dirs: list[Path]) -> list[str]:
    return [*DIR_ARGS, "--journal-dir", str(journal), "--ledger-dirs", ",".join(map(str, ledger_dirs))]


def entry_logs(ledger_dir: Path) -> list[Path]:
    return sorted((ledger_dir / "entries").glob("*.log"))


def read_from(bookie: LocalBookie, lid: LedgerId, first: int, last: int) -> tuple[list[Status], list[bytes]]:
    """Entries first..last from this bookie alone, 100 at a time (an answer is byte-capped)."""
    conn = BookieClient(bookie.bookie_id, bookie.address, rpc_timeout_s=30.0)
    statuses: list[Status] = []
    entries: list[bytes] = []
    try:
        for start in range(first, last + 1, 100):
            resp = conn.read((lid.scope_id, lid.id), start, min(start + 99, last))
            assert len(resp.entry_status) == min(start + 99, last) - start + 1, "a short answer"
            statuses += [Status(s) for s in resp.entry_status]
            entries += list(resp.entries)
        return statuses, entries
    finally:
        conn.close()


def mounted(fs: SmallFilesystem) -> SmallFilesystem:
    try:
        return fs.mount()
    except FaultUnavailable as exc:
        pytest.skip(str(exc))


def test_filling_one_ledger_dir_leaves_the_bookie_writable(zk_uri: str, tmp_path: Path) -> None:
    small = mounted(SmallFilesystem(tmp_path / "small", FS_BYTES))
    cluster = LocalCluster(0, metadata_uri=zk_uri, work_dir=tmp_path / "cluster")
    try:
        l1, l2 = small.mount_point / "ledgers", tmp_path / "l2"
        sick = cluster.add_bookie(extra_args=dir_args(tmp_path / "journal", [l1, l2]))
        other = cluster.add_bookie()
        acked: dict[int, bytes] = {}
        with LedgerClient(cluster.metadata_uri, add_timeout_s=30) as client:
            writer = client.create_ledger(2, 2, 2, ensemble=[sick.bookie_id, other.bookie_id])
            for i in range(20):
                acked[writer.add_entry(payload(1, i))] = payload(1, i)
            small.fill(leave_bytes=0)
            logs_before = len(entry_logs(l2))
            futures = [(i, writer.add_entry_async(payload(1, i))) for i in range(20, 400)]  # ~6 MiB: logs in l2
            for i, f in futures:
                acked[f.result(timeout=60)] = payload(1, i)
            assert writer.metadata.segments[-1].bookies == (sick.bookie_id, other.bookie_id), \
                "the writer moved off the bookie whose other ledger directory has room"
            assert len(entry_logs(l2)) > logs_before
            assert not {b.bookie_id: b.read_only for b in client.bookies()}[sick.bookie_id]
            writer.close()
            got = {e.entry_id: e.payload for e in client.open_ledger(writer.ledger_id).read_entries(0, max(acked))}
            assert got == acked, "acknowledged entries lost or changed"
            statuses, data = read_from(sick, writer.ledger_id, 0, max(acked))
            assert statuses == [Status.OK] * len(acked)  # held by the bookie itself, across both directories
    finally:
        cluster.close()
        small.unmount()


def test_a_wiped_ledger_dir_is_marked_answers_unknown_and_autorecovery_restores_it(zk_uri: str,
                                                                                   tmp_path: Path) -> None:
    uri = zk_uri_with_short_sessions(zk_uri)
    cluster = LocalCluster(0, metadata_uri=uri, work_dir=tmp_path / "cluster")
    service = None
    try:
        l1, l2 = tmp_path / "l1", tmp_path / "l2"
        sick = cluster.add_bookie(extra_args=dir_args(tmp_path / "journal", [l1, l2]))
        others = [cluster.add_bookie() for _ in range(3)]
        written = Written()
        with LedgerClient(uri, add_timeout_s=30) as client:
            for n in range(5):  # ~3 MiB on the sick bookie: entry logs in both of its ledger dirs
                w = client.create_ledger(3, 3, 2, ensemble=[sick.bookie_id, others[n % 3].bookie_id,
                                                             others[(n + 1) % 3].bookie_id])
                data = [payload(n, i) for i in range(40)]
                for f in [w.add_entry_async(p) for p in data]:
                    f.result(timeout=60)
                w.close()
                written.entries[w.ledger_id] = data
        sick.stop()
        assert entry_logs(l1) and entry_logs(l2)
        shutil.rmtree(l2)  # the disk is wiped (or replaced by an empty one)
        l2.mkdir()
        sick.start()

        with LedgerClient(uri, add_timeout_s=30) as client:
            marks = {m.ledger_id: m for m in UnderReplicationManager(client.store).list()}
            assert marks and set(marks) <= set(written.entries)
            assert all(m.lost_bookies == (sick.bookie_id,) and m.reason == REASON_LOST_DIRECTORY
                       for m in marks.values())
            for lid, data in written.entries.items():
                statuses, _ = read_from(sick, lid, 0, len(data) - 1)
                assert Status.NO_SUCH_ENTRY not in statuses, f"{lid}: 'no such entry' for what it held"
                assert (Status.UNKNOWN_ENTRY_STATE in statuses) == (lid in marks), (lid, statuses)

            service = Autorecovery(uri, tmp_path / "autorecovery.log")
            wait_until(lambda: not UnderReplicationManager(client.store).ledger_ids(), "every mark cleared")
            for lid in marks:
                assert sick.bookie_id not in client.ledger_metadata(lid).bookies()  # copied elsewhere
            # Every copy of every entry, each read from each bookie of its write set alone.
            assert check_every_copy(client, written) == 3 * sum(len(d) for d in written.entries.values())
        assert service.stop() == 0, service.log()[-3000:]
    finally:
        if service is not None:
            service.kill()
        cluster.close()


def test_kill_9_with_the_journal_on_another_file_system_loses_nothing(zk_uri: str, tmp_path: Path) -> None:
    small = mounted(SmallFilesystem(tmp_path / "small", FS_BYTES))  # the entry logs; the journal stays on disk
    cluster = LocalCluster(0, metadata_uri=zk_uri, work_dir=tmp_path / "cluster")
    try:
        ledger_dirs = [small.mount_point / "l1", small.mount_point / "l2"]
        sick = cluster.add_bookie(extra_args=dir_args(tmp_path / "journal", ledger_dirs))
        others = [cluster.add_bookie() for _ in range(2)]
        acked: dict[int, bytes] = {}
        with LedgerClient(cluster.metadata_uri, add_timeout_s=30) as client:
            writer = client.create_ledger(2, 2, 2, ensemble=[sick.bookie_id, others[0].bookie_id])
            killed = threading.Event()

            def kill_when_busy() -> None:
                wait_until(lambda: len(acked) >= 300, "300 entries acknowledged")
                sick.kill()
                killed.set()

            killer = threading.Thread(target=kill_when_busy)
            killer.start()
            window = []
            for i in range(1200):
                window.append((i, writer.add_entry_async(payload(3, i, 1024))))
                if len(window) >= 100:
                    j, f = window.pop(0)
                    acked[f.result(timeout=60)] = payload(3, j, 1024)
            for j, f in window:
                acked[f.result(timeout=60)] = payload(3, j, 1024)
            killer.join(WAIT_S)
            assert killed.is_set()
            writer.close()
            first = writer.metadata.segments[0]
            assert sick.bookie_id in first.bookies and len(writer.metadata.segments) > 1
            on_sick = [e for e in sorted(acked) if e < writer.metadata.segments[1].first_entry_id]
            assert len(on_sick) >= 300
        sick.start()  # the journal (on disk) is replayed into the entry logs (on the tmpfs)
        statuses, data = read_from(sick, writer.ledger_id, on_sick[0], on_sick[-1])
        assert statuses == [Status.OK] * len(on_sick), "an acknowledged entry is missing on the killed bookie"
        assert len(data) == len(on_sick)
    finally:
        cluster.close()
        small.unmount()
