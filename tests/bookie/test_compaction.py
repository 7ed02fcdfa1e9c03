"""Compaction of entry logs (bookie/storage/engine_compaction.py) driven by GC rounds with a
scripted metadata lookup: live entries of mostly-dead logs are copied and the old logs freed,
a crash at each step loses no live entry and leaves no unreferenced log after the reopen, and
a CLOSED ledger's dirty tail is dropped durably."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

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
PER_LEDGER = 200
GONE, KEPT = (0, 1), (0, 2)


class Crash(Exception):
    """Stands for a kill -9 at that point (the files are copied first)."""


def _bytes(data_dir: Path) -> int:
    return sum(p.stat().st_size for p in entry_log_files(data_dir))


def _interleaved(engine: BookieStorage) -> None:
    """GONE and KEPT batches alternate, so every entry log holds both (about half live)."""
    for first in range(0, PER_LEDGER, 20):
        for ledger in (GONE, KEPT):
            assert add_ids(engine, ledger, range(first, first + 20), size=ENTRY) == Status.OK


def _gc(engine: BookieStorage, closed: dict[tuple[int, int], int] | None = None) -> GarbageCollector:
    def lookup(ledger: tuple[int, int]) -> LedgerFacts:
        if ledger == GONE:
            return LedgerFacts(exists=False)
        return LedgerFacts(True, (closed or {}).get(ledger))
    return GarbageCollector(engine, lookup, GcSettings(interval_s=0, lookups_per_s=0,
                                                       compaction_rate_bytes_s=0))


def _no_unreferenced_logs(engine: BookieStorage, data_dir: Path) -> None:
    on_disk = {int(p.stem, 16) for p in entry_log_files(data_dir)}
    usage = engine.entry_log_usage()
    current = max(on_disk)
    assert on_disk == set(usage)
    assert all(live > 0 for log_id, (_, live) in usage.items() if log_id != current), usage


def test_compaction_frees_the_dead_half_of_mixed_logs(tmp_path: Path) -> None:
    data = tmp_path / "data"
    engine = open_engine(data, entry_log_max_bytes=LOG_MAX)
    try:
        _interleaved(engine)
        engine.checkpoint()
        before = _bytes(data)
        stats = _gc(engine).run_now()
        freed = before - _bytes(data)
        assert freed >= 0.9 * PER_LEDGER * ENTRY, (before, freed)
        assert stats["compaction_runs_total"] == 1
        read_all_ok(engine, KEPT, range(PER_LEDGER), size=ENTRY)
    finally:
        engine.close()
    reopened = open_engine(data, entry_log_max_bytes=LOG_MAX)
    try:
        read_all_ok(reopened, KEPT, range(PER_LEDGER), size=ENTRY)
        _no_unreferenced_logs(reopened, data)
    finally:
        reopened.close()


@pytest.mark.parametrize("crash_at", ["before_checkpoint", "before_unlink"])
def test_crash_during_compaction_loses_nothing_and_leaks_nothing(tmp_path: Path, crash_at: str,
                                                                 monkeypatch: Any) -> None:
    data = tmp_path / "data"
    crashed = tmp_path / "crashed"
    engine = open_engine(data, entry_log_max_bytes=LOG_MAX)
    try:
        _interleaved(engine)
        gc = _gc(engine)
        gc.run_now(major=False)  # deletes GONE; logs about half live: no minor compaction
        real_reclaim, real_remove = engine.reclaim_entry_logs, engine._logs.remove

        def crash_in_reclaim() -> int:
            if crash_at == "before_checkpoint":
                crash_copy(data, crashed)  # copies written and fsynced, index not durable
                raise Crash()
            return real_reclaim()

        def crash_in_remove(log_id: int) -> int:
            crash_copy(data, crashed)  # index durable, old logs not yet removed
            raise Crash()
        monkeypatch.setattr(engine, "reclaim_entry_logs", crash_in_reclaim)
        monkeypatch.setattr(engine._logs, "remove", crash_in_remove)
        with pytest.raises(Crash):
            gc.run_now(major=True)
        monkeypatch.setattr(engine._logs, "remove", real_remove)
    finally:
        engine.close()
    reopened = open_engine(crashed, entry_log_max_bytes=LOG_MAX)
    try:
        read_all_ok(reopened, KEPT, range(PER_LEDGER), size=ENTRY)
        assert reopened.ledger_state(GONE) is None
        _no_unreferenced_logs(reopened, crashed)
    finally:
        reopened.close()


def test_compaction_drops_a_dirty_tail_durably(tmp_path: Path) -> None:
    data = tmp_path / "data"
    engine = open_engine(data, entry_log_max_bytes=LOG_MAX)
    try:
        _interleaved(engine)
        _gc(engine, closed={KEPT: 99}).run_now()
    finally:
        engine.close()
    reopened = open_engine(data, entry_log_max_bytes=LOG_MAX)  # the in-memory cap is gone
    try:
        read_all_ok(reopened, KEPT, range(100), size=ENTRY)
        # 100 and 150 lay in compacted logs (the newest entries may sit in the current log,
        # which is rolled and compacted only once it is mostly dead).
        for entry_id in (100, 150):
            assert reopened.read_entry(KEPT, entry_id).status == Status.NO_SUCH_ENTRY
    finally:
        reopened.close()


def test_a_mostly_dead_current_log_is_rolled_and_compacted(tmp_path: Path) -> None:
    """A bookie with little traffic: everything it holds sits in its current entry log. Once GC
    made that log mostly dead (and it holds at least 1/16 of the log size limit), compaction
    rolls it and frees it, instead of keeping the dead bytes until appends fill the log."""
    data = tmp_path / "data"
    engine = open_engine(data, entry_log_max_bytes=LOG_MAX)
    try:
        assert add_ids(engine, GONE, range(40), size=ENTRY) == Status.OK  # 160 KiB of a 256 KiB log
        assert add_ids(engine, KEPT, range(3), size=ENTRY) == Status.OK
        assert len(entry_log_files(data)) == 1
        before = _bytes(data)
        gc = _gc(engine)
        gc.run_now(major=False)  # 3 of 43 entries live: under the minor threshold (0.2)
        freed = before - _bytes(data)
        assert freed >= 0.9 * 40 * ENTRY, (before, freed)
        read_all_ok(engine, KEPT, range(3), size=ENTRY)
        assert add_ids(engine, KEPT, range(3, 6), size=ENTRY) == Status.OK  # appends go on
    finally:
        engine.close()
    reopened = open_engine(data, entry_log_max_bytes=LOG_MAX)
    try:
        read_all_ok(reopened, KEPT, range(6), size=ENTRY)
        _no_unreferenced_logs(reopened, data)
    finally:
        reopened.close()


def test_a_small_or_live_current_log_is_not_rolled(tmp_path: Path) -> None:
    data = tmp_path / "data"
    engine = open_engine(data, entry_log_max_bytes=LOG_MAX)
    try:
        assert add_ids(engine, GONE, range(2), size=ENTRY) == Status.OK  # 8 KiB: under 1/16 of the limit
        assert add_ids(engine, KEPT, range(1), size=ENTRY) == Status.OK
        current = engine._logs.current_id
        assert not engine.roll_dead_current_log(0.99)
        assert add_ids(engine, KEPT, range(1, 40), size=ENTRY) == Status.OK  # big, but mostly live
        assert not engine.roll_dead_current_log(0.2)
        assert engine._logs.current_id == current
    finally:
        engine.close()
