"""A run (wire version 2: one AddBatch of lengths and one body) on the bookie: the add handler
cuts it into views of its body, storage writes it as one journal record and one contiguous index
span, and the index still answers single entries and lets each of these split the run:
compaction (copying the live part of a run out of a mostly dead log), closing a ledger short
(`set_closed_last` in the middle of a run), and peer repair (one entry of a run rewritten)."""

from __future__ import annotations

from pathlib import Path

from bookie.add_handler import AddHandler
from bookie.metrics import Metrics
from bookie.proto import bookie_pb2 as pb
from bookie.scrubber import Scrubber, ScrubSettings
from bookie.status import Status
from bookie.storage import BookieStorage
from bookie.storage.gc import GarbageCollector, GcSettings, LedgerFacts
from tests.bookie.test_scrubber import flip_byte_of
from tests.bookie.test_storage_support import KEY, add, entry_log_files, open_engine, payload, read_all_ok

SIZE = 4096
RUN = 64
LOG_MAX = 256 * 1024
GONE, KEPT = (0, 1), (0, 2)


def add_run(engine: BookieStorage, ledger: tuple[int, int], first: int, count: int, *, refuse_over: int = 2**20,
            sizes: list[int] | None = None) -> tuple[Status, int]:
    """Entries first..first+count-1 as ONE run-encoded batch through the add handler:
    (status, stored_count) of its answer."""
    sizes = sizes or [SIZE] * count
    datas = [payload(ledger, first + i, sizes[i]) for i in range(count)]
    batch = pb.AddBatch(request_id=7, ledger=pb.LedgerRef(scope_id=ledger[0], ledger_id=ledger[1]), master_key=KEY,
                        entry_ids=range(first, first + count), lacs=[first + i - 1 for i in range(count)],
                        run_lengths=[len(d) for d in datas], run_body=b"".join(datas))
    (outcome,) = AddHandler(engine, Metrics(), entry_bytes_max=refuse_over).handle(pb.AddRequest(batches=[batch]))
    return outcome.status, outcome.stored


def _runs_of_two_ledgers(engine: BookieStorage) -> None:
    """Runs of GONE and KEPT alternate, so every entry log holds both (about half live)."""
    for first in range(0, 4 * RUN, RUN):
        for ledger in (GONE, KEPT):
            assert add_run(engine, ledger, first, RUN) == (Status.OK, 0)


def _gc(engine: BookieStorage, closed: dict[tuple[int, int], int]) -> GarbageCollector:
    def lookup(ledger: tuple[int, int]) -> LedgerFacts:
        return LedgerFacts(exists=False) if ledger == GONE else LedgerFacts(True, closed.get(ledger))
    return GarbageCollector(engine, lookup, GcSettings(interval_s=0, lookups_per_s=0, compaction_rate_bytes_s=0))


def test_a_run_refused_from_an_entry_on_stores_the_entries_before_it(tmp_path: Path) -> None:
    engine = open_engine(tmp_path / "data")
    try:
        sizes = [100] * 4 + [5000] + [100] * 3
        assert add_run(engine, KEPT, 0, 8, refuse_over=4096, sizes=sizes) == (Status.TOO_LARGE, 4)
        read_all_ok(engine, KEPT, range(4), size=100)
        assert all(engine.read_entry(KEPT, e).status == Status.NO_SUCH_ENTRY for e in range(4, 8))
        assert add_run(engine, KEPT, 8, 2, refuse_over=50, sizes=[100, 10]) == (Status.TOO_LARGE, 0)
        assert engine.read_entry(KEPT, 8).status == Status.NO_SUCH_ENTRY
    finally:
        engine.close()


def test_closing_short_and_compaction_split_a_run(tmp_path: Path) -> None:
    """The ledger is closed at entry 100, in the middle of its second run: entries past it are
    not served at once, and compaction keeps exactly the run's part up to 100, durably."""
    data = tmp_path / "data"
    engine = open_engine(data, entry_log_max_bytes=LOG_MAX)
    last = RUN + RUN // 2 + 4  # inside the second run
    try:
        _runs_of_two_ledgers(engine)
        logs_before = len(entry_log_files(data))
        engine.set_closed_last(KEPT, last)  # closing short
        read_all_ok(engine, KEPT, range(last + 1), size=SIZE)
        assert all(engine.read_entry(KEPT, e).status == Status.NO_SUCH_ENTRY for e in range(last + 1, 4 * RUN))
        _gc(engine, closed={KEPT: last}).run_now()  # compaction copies the live part of the runs
        assert len(entry_log_files(data)) < logs_before, "compaction freed no log"
        read_all_ok(engine, KEPT, range(last + 1), size=SIZE)
    finally:
        engine.close()
    reopened = open_engine(data, entry_log_max_bytes=LOG_MAX)  # the in-memory cap is gone
    try:
        read_all_ok(reopened, KEPT, range(last + 1), size=SIZE)
        assert reopened.read_entry(KEPT, last + 1).status == Status.NO_SUCH_ENTRY  # dropped with its log
        assert reopened.ledger_state(GONE) is None
    finally:
        reopened.close()


def test_peer_repair_rewrites_one_entry_of_a_run(tmp_path: Path) -> None:
    """One entry in the middle of a run is damaged on disk; the scrubber finds exactly it, peer
    repair writes the good copy back alone, and the run's other entries stay where they were."""
    data = tmp_path / "data"
    engine = open_engine(data)
    try:
        assert add_run(engine, KEPT, 0, RUN) == (Status.OK, 0)
        engine.checkpoint()
        damaged = RUN // 2
        before = {e: engine._ledgers[KEPT].index.get(e) for e in range(RUN)}
        flip_byte_of(engine, data, KEPT, damaged)
        reported: list[int] = []

        def repair(ledger: tuple[int, int], ids: list[int]) -> int:
            reported.extend(ids)
            for e in ids:
                assert add(engine, ledger, [(e, -1, payload(ledger, e, SIZE))], recovery=True) == Status.OK
            return len(ids)

        result = Scrubber(engine, repair, ScrubSettings(interval_s=0, rate_bytes_s=0)).run_now()
        assert reported == [damaged] and result["repaired"] == 1
        after = {e: engine._ledgers[KEPT].index.get(e) for e in range(RUN)}
        assert [e for e in range(RUN) if after[e] != before[e]] == [damaged]  # the run split around it
        read_all_ok(engine, KEPT, range(RUN), size=SIZE)
    finally:
        engine.close()
    reopened = open_engine(data)
    try:
        read_all_ok(reopened, KEPT, range(RUN), size=SIZE)
    finally:
        reopened.close()
