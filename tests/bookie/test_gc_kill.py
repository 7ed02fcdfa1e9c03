"""kill -9 of a real bookie during garbage collection and during compaction (issue 18,
Acceptance: "every acknowledged live entry reads back with its exact bytes; no entry log is left
unreferenced after restart"). LEDGER_GC_KILL_ROUNDS rounds (default 2; 50 by hand).

Bookie 0 runs GC every second and compacts slowly (--compaction-rate-mb-s 1, minor threshold
0.6). Each round:
1. writes a live ledger and two to-be-deleted ledgers (E=W=A=3: every acknowledged entry is
   on bookie 0), then deletes them: one through the client, one in metadata only;
2. "during GC": as soon as GC's scan has deleted the metadata-only ledger on bookie 0 (its
   ledger count drops), kill -9 it (the round's checkpoint, removal and compaction run then);
3. restarts it, then restarts it cleanly (which rolls its entry log, so this round's log
   becomes a compaction candidate even if the open replayed the journal into a new log) and,
   "during compaction": as soon as a compaction's side log appears (a log file newer than
   the ones present at start), kill -9 it;
4. restarts it with GC off and checks: every acknowledged live entry of every round reads back
   from bookie 0 (a bookie RPC, by entry id) with exact bytes; then stops it (SIGTERM) and, from
   its index store, checks that every entry log on disk but the current one is pointed into by
   some index location (an unreferenced log would be a permanent leak);
5. starts it with GC on, kills it -9 right after a compaction finished (its log line), and
   checks the live entries again after a restart.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bookie.status import Status
from bookie.storage.checkpoint import load_ledger_snapshots
from bookie.storage.index_store import IndexStore
from bookie.storage.ledger_index import unpack_location
from metadata import LedgerId
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.protocol.digest import Digest
from pyspark_ledger.protocol.entry_format import decode_entry
from pyspark_ledger.testing.faults import kill9
from pyspark_ledger.testing.local_cluster import LocalBookie, LocalCluster
from pyspark_ledger.transport.bookie_client import BookieClient

ROUNDS = int(os.environ.get("LEDGER_GC_KILL_ROUNDS", "2"))
ENTRY_BYTES = 256 * 1024
ENTRIES = 8
GC_ARGS = ["--gc-interval-s", "1", "--compaction-rate-mb-s", "1", "--minor-compaction-threshold", "0.6",
           "--major-compaction-threshold", "0.8"]
GC_OFF = ["--gc-interval-s", "0"]
WAIT_S = 60.0


def wait_until(predicate: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.02)


def log_ids(bookie: LocalBookie) -> set[int]:
    return {int(p.stem, 16) for p in (bookie.data_dir / "entries").glob("*.log")}


def ledger_count(bookie: LocalBookie) -> int:
    with BookieClient(bookie.bookie_id, bookie.address) as bc:
        return int(bc.info(timeout_s=10).ledger_count)


def compactions_done(bookie: LocalBookie) -> int:
    return bookie.log_path.read_text(errors="replace").count("compaction done")


def start_with(bookie: LocalBookie, base: list[str], args: list[str]) -> None:
    bookie.extra_args = [*base, *args]  # argparse: the last flag wins
    bookie.start()


@pytest.fixture
def cluster(zk_uri: str, tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(3, metadata_uri=zk_uri, work_dir=tmp_path / "cluster", bookie_args=GC_ARGS) as c:
        yield c


def write_round(client: LedgerClient, acked: dict[LedgerId, list[bytes]]) -> list[LedgerId]:
    """One live ledger (recorded in acked) and two to delete, interleaved in the entry log."""
    live, *doomed = (client.create_ledger(3, 3, 3) for _ in range(3))
    acked[live.ledger_id] = []
    for i in range(ENTRIES):
        for w in (live, *doomed):
            data = os.urandom(ENTRY_BYTES)
            assert w.add_entry(data) == i
            if w is live:
                acked[live.ledger_id].append(data)
    for w in (live, *doomed):
        w.close()
    return [w.ledger_id for w in doomed]


def assert_live_entries_read_back(bookie: LocalBookie, acked: dict[LedgerId, list[bytes]]) -> None:
    digest = Digest.for_ledger("crc32c")
    with BookieClient(bookie.bookie_id, bookie.address) as bc:
        for lid, payloads in acked.items():
            for i, want in enumerate(payloads):
                resp = bc.read((lid.scope_id, lid.id), i, i)
                assert list(resp.entry_status) == [Status.OK], f"entry {i} of {lid} lost: {resp}"
                assert decode_entry(digest, resp.entries[0], lid.scope_id, lid.id, i).payload == want


def unreferenced_entry_logs(bookie: LocalBookie) -> set[int]:
    """Entry logs of a stopped bookie no index location points into, but the current (newest)."""
    on_disk = log_ids(bookie)
    store = IndexStore(bookie.data_dir / "ledgers", fsync=False)
    try:
        snapshots = load_ledger_snapshots(store, bookie.data_dir / "ledgers", False)
        referenced = {unpack_location(loc)[0] for loaded in snapshots if not loaded.meta.deleted
                      for _, loc, _ in loaded.meta.index.items()}
    finally:
        store.close()
    return on_disk - referenced - {max(on_disk, default=0)}


def test_kill9_during_gc_and_compaction_loses_no_live_entry_and_leaks_no_log(cluster: LocalCluster) -> None:
    victim = cluster.bookies[0]
    base = list(victim.extra_args)
    acked: dict[LedgerId, list[bytes]] = {}
    compaction_kills = missed = 0
    with LedgerClient(cluster.metadata_uri) as client:
        # A round whose GC found no log to compact (it reclaimed whole logs instead) cannot kill
        # a compaction: it is retried, a bounded number of times, and at least one kill must land.
        while compaction_kills < ROUNDS and missed <= ROUNDS:
            by_client, by_metadata = write_round(client, acked)
            client.delete_ledger(by_client)
            count = ledger_count(victim)
            client.ledgers.delete(by_metadata, client.ledgers.read(by_metadata)[1])
            wait_until(lambda: ledger_count(victim) < count, "GC's scan deleted the metadata-only ledger")
            assert victim.proc is not None
            kill9(victim.proc)  # during GC: the round's removal and compaction follow its scan
            victim.proc.wait(timeout=15)
            victim.proc = None

            # If the kill came before the round's checkpoint, the open replayed the journal into
            # its new current log; a clean restart rolls that log so it can be compacted (GC off
            # meanwhile, so that no compaction finishes before the kill below can land in it).
            start_with(victim, base, GC_OFF)
            victim.stop()
            start_with(victim, base, [])
            at_start = max(log_ids(victim))
            try:
                wait_until(lambda: max(log_ids(victim)) > at_start, "a compaction side log", timeout_s=30.0)
            except AssertionError:
                missed += 1
                continue
            kill9(victim.proc)  # during compaction: the side log is being written
            victim.proc.wait(timeout=15)
            victim.proc = None
            compaction_kills += 1

            start_with(victim, base, GC_OFF)
            assert_live_entries_read_back(victim, acked)
            victim.stop()
            assert unreferenced_entry_logs(victim) == set()
            # Right after a compaction finished (index switched, old logs removed): kill -9 again.
            start_with(victim, base, [])
            done = compactions_done(victim)
            wait_until(lambda: compactions_done(victim) > done, "a compaction finished")
            kill9(victim.proc)
            victim.proc = None
            start_with(victim, base, GC_OFF)
            assert_live_entries_read_back(victim, acked)
            victim.stop()
            start_with(victim, base, [])
    assert compaction_kills == ROUNDS, f"only {compaction_kills} of {ROUNDS} kills landed in a compaction ({missed} missed)"
    print(f"gc kill: rounds={ROUNDS} compaction_kills={compaction_kills} missed={missed} live_ledgers={len(acked)} "
          f"live_entries={sum(len(v) for v in acked.values())}")
