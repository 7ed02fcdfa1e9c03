"""Garbage collection in the storage engine (bookie/storage/gc.py, engine_gc.py) with a
scripted metadata lookup: deleted ledgers' entry logs are removed, an erroring metadata store
deletes nothing, dirty tails are never served, and a crash between the checkpoint and the
unlink leaks no entry log."""

from __future__ import annotations

from pathlib import Path

from bookie.status import Status
from bookie.storage import BookieStorage
from bookie.storage.gc import GarbageCollector, GcSettings, LedgerFacts
from tests.bookie.test_storage_support import (
    add_ids,
    crash_copy,
    entry_log_files,
    open_engine,
    read_all_ok,
)

LOG_MAX = 256 * 1024
ENTRY = 4096
PER_LEDGER = 200  # ~0.8 MB per ledger: several entry logs each


def _bytes(data_dir: Path) -> int:
    return sum(p.stat().st_size for p in entry_log_files(data_dir))


def _fill(engine: BookieStorage, ledgers: list[tuple[int, int]]) -> None:
    for ledger in ledgers:
        for first in range(0, PER_LEDGER, 50):
            assert add_ids(engine, ledger, range(first, first + 50), size=ENTRY) == Status.OK


def _collector(engine: BookieStorage, present: set[tuple[int, int]],
               closed: dict[tuple[int, int], int] | None = None) -> GarbageCollector:
    def lookup(ledger: tuple[int, int]) -> LedgerFacts:
        if ledger not in present:
            return LedgerFacts(exists=False)
        return LedgerFacts(True, (closed or {}).get(ledger))
    return GarbageCollector(engine, lookup, GcSettings(interval_s=0, lookups_per_s=0))


def test_deleted_ledgers_bytes_are_freed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    engine = open_engine(data, entry_log_max_bytes=LOG_MAX)
    try:
        gone = [(0, i) for i in range(1, 6)]
        kept = [(0, i) for i in range(10, 12)]
        _fill(engine, gone + kept)
        engine.checkpoint()
        before = _bytes(data)
        gone_bytes = len(gone) * PER_LEDGER * ENTRY
        progress: list[tuple[str, int, int]] = []
        stats = _collector(engine, set(kept)).run_now(lambda *p: progress.append(p))
        freed = before - _bytes(data)
        assert freed >= 0.9 * gone_bytes, (before, freed, gone_bytes)
        assert stats["ledgers_deleted"] == len(gone)
        assert stats["reclaimed_bytes"] == freed
        assert [p[0] for p in progress[-2:]] == ["reclaim", "compaction"]
        assert sorted(engine.ledgers()) == kept
        assert stats["reclaimed_bytes_total"] == freed
        for ledger in kept:
            read_all_ok(engine, ledger, range(PER_LEDGER), size=ENTRY)
    finally:
        engine.close()
    reopened = open_engine(data, entry_log_max_bytes=LOG_MAX)
    try:
        for ledger in kept:
            read_all_ok(reopened, ledger, range(PER_LEDGER), size=ENTRY)
        assert all(reopened.ledger_state(g) is None for g in gone)
    finally:
        reopened.close()


def test_metadata_errors_delete_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    engine = open_engine(data, entry_log_max_bytes=LOG_MAX)
    try:
        ledgers = [(0, i) for i in range(1, 4)]
        _fill(engine, ledgers)
        before = _bytes(data)

        def unreachable(ledger: tuple[int, int]) -> LedgerFacts:
            raise ConnectionError("metadata store unreachable")
        gc = GarbageCollector(engine, unreachable, GcSettings(interval_s=0, lookups_per_s=0))
        stats = gc.run_now()
        assert stats["ledgers_deleted"] == 0
        assert stats["lookup_errors"] == len(ledgers)
        assert _bytes(data) >= before
        for ledger in ledgers:
            read_all_ok(engine, ledger, range(PER_LEDGER), size=ENTRY)
    finally:
        engine.close()


def test_dirty_tail_of_a_closed_ledger_is_never_served(tmp_path: Path) -> None:
    engine = open_engine(tmp_path / "data")
    try:
        ledger = (0, 7)
        assert add_ids(engine, ledger, range(10)) == Status.OK
        _collector(engine, {ledger}, closed={ledger: 5}).run_now()
        read_all_ok(engine, ledger, range(6))
        for entry_id in range(6, 10):
            assert engine.read_entry(ledger, entry_id).status == Status.NO_SUCH_ENTRY
        status, results = engine.read_range(ledger, 0, 9, 100, 2**20)
        assert status == Status.OK
        assert [r.entry_id for r in results if r.status == Status.OK] == list(range(6))
        assert engine.read_lac(ledger) == (Status.OK, 5)
        assert engine.wait_lac(ledger, 9, 0.01) == (Status.OK, 5)
    finally:
        engine.close()


def test_dead_entry_logs_left_by_a_crash_are_removed_at_open(tmp_path: Path) -> None:
    data = tmp_path / "data"
    engine = open_engine(data, entry_log_max_bytes=LOG_MAX)
    try:
        gone, kept = (0, 1), (0, 2)
        _fill(engine, [gone, kept])
        assert engine.delete_ledger(gone) == Status.OK
        engine.checkpoint()  # as GC does before unlinking; the crash comes before the unlink
        crashed = crash_copy(data, tmp_path / "crashed")
        dead_before = _bytes(crashed)
    finally:
        engine.close()
    reopened = open_engine(crashed, entry_log_max_bytes=LOG_MAX)
    try:
        assert dead_before - _bytes(crashed) >= 0.9 * PER_LEDGER * ENTRY
        read_all_ok(reopened, kept, range(PER_LEDGER), size=ENTRY)
        referenced = set(reopened.entry_log_usage())
        on_disk = {int(p.stem, 16) for p in entry_log_files(crashed)}
        assert on_disk == referenced
    finally:
        reopened.close()


def test_compaction_intervals_pick_the_kind_of_each_round() -> None:
    from bookie.storage.gc import GcSettings, compaction_due

    st = GcSettings(interval_s=10, minor_compaction_interval_s=0, major_compaction_interval_s=3600)
    assert compaction_due(st, since_major_s=10, since_minor_s=10) == "minor"  # 0: every round
    assert compaction_due(st, since_major_s=3596, since_minor_s=10) == "major"  # within half a round
    st = GcSettings(interval_s=10, minor_compaction_interval_s=60, major_compaction_interval_s=3600)
    assert compaction_due(st, since_major_s=30, since_minor_s=30) is None
    assert compaction_due(st, since_major_s=60, since_minor_s=60) == "minor"
