"""Smoke test on a real three-node ZooKeeper ensemble (issue 31, item 6): ledgers created through
one server and looked up at once by a bookie's GC through another are never deleted. Each ledger
gets a GC round of its own right after its creation; how often the other server's first plain
read missed the ledger (the lag the sync closes) is printed, not asserted: it depends on timing."""

from __future__ import annotations

from pathlib import Path

from bookie.gc_service import highest_ledger_id, metadata_lookup, records_in_flight
from bookie.status import Status
from bookie.storage.gc import GarbageCollector, GcSettings
from metadata.ledger import LedgerMetadata
from metadata.ledgers import LedgerManager
from metadata.quorum import QuorumConfig
from metadata.uri import open_store
from pyspark_ledger.testing.zookeeper_server import LocalZooKeeperEnsemble
from tests.bookie.test_storage_support import add_ids, open_engine

LEDGERS = 40


def test_ledgers_created_through_another_server_are_never_collected(tmp_path: Path) -> None:
    with LocalZooKeeperEnsemble(tmp_path / "ensemble") as ensemble:  # entering starts it (once)
        leader = ensemble.leader()
        follower = next(m for m in ensemble.members if m is not leader)
        engine = open_engine(tmp_path / "data")
        writer_store = open_store(leader.uri("/gc"))
        gc_store = open_store(follower.uri("/gc"))
        try:
            creator, reader = LedgerManager(writer_store), LedgerManager(gc_store)
            gc = GarbageCollector(engine, metadata_lookup(gc_store), GcSettings(interval_s=0, lookups_per_s=0),
                                  bookie_id="b0", highest_id=highest_ledger_id(gc_store),
                                  in_flight=records_in_flight(gc_store))
            missed_first_read = 0
            for _ in range(LEDGERS):
                meta = LedgerMetadata.new(creator.allocate_ledger_id(0), QuorumConfig(1, 1, 1), ["b0"])
                creator.create(meta)
                missed_first_read += reader.get(meta.ledger_id) is None
                assert add_ids(engine, (0, meta.ledger_id.id), range(2)) == Status.OK
                assert gc.run_now(compact=False)["ledgers_deleted"] == 0
            assert len(engine.ledgers()) == LEDGERS
            print(f"zk ensemble gc: ledgers={LEDGERS} plain first reads through the follower that missed="
                  f"{missed_first_read} deleted=0")
        finally:
            gc_store.close()
            writer_store.close()
            engine.close()
