"""Bulk range reads (BookieStorage.read_runs, bookie/storage/range_read.py): runs of consecutive
verified entries, gaps and damaged copies between them, bounds, pread planning."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bookie import crc_batch
from bookie.status import Status
from bookie.storage import BookieStorage, range_read
from bookie.storage.range_read import RangeRead
from tests.bookie.test_storage_support import (
    add,
    add_ids,
    entry_log_files,
    open_engine,
    payload,
)

LG = (7, 2**64 - 3)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[BookieStorage]:
    e = open_engine(tmp_path / "d")
    try:
        yield e
    finally:
        e.close()


def entries_of(answer: RangeRead) -> dict[int, bytes]:
    """Every entry of the runs, split by their lengths (and checked to add up)."""
    out: dict[int, bytes] = {}
    for run in answer.runs:
        assert sum(run.lengths) == len(run.data) and run.count >= 1
        at = 0
        for i, n in enumerate(run.lengths):
            out[run.first_entry_id + i] = run.data[at:at + n]
            at += n
    return out


def runs_of(answer: RangeRead) -> list[tuple[int, int]]:
    return [(r.first_entry_id, r.first_entry_id + r.count - 1) for r in answer.runs]


def read(engine: BookieStorage, first: int, last: int, max_entries: int = 100_000,
         max_bytes: int = 2**30) -> RangeRead:
    status, answer = engine.read_runs(LG, first, last, max_entries, max_bytes)
    assert status == Status.OK and answer is not None
    return answer


def flip(data_dir: Path, needle: bytes, at: int) -> None:
    """Flip one byte `at` bytes after the start of `needle` in the entry logs."""
    for path in entry_log_files(data_dir):
        raw = bytearray(path.read_bytes())
        i = raw.find(needle)
        if i >= 0:
            raw[i + at] ^= 0x5A
            path.write_bytes(bytes(raw))
            return
    raise AssertionError("needle not found in any entry log")


def serve_as_views(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every entry verified and served as a view of its pread buffer (range_read.VIEW_BYTES_MIN:
    the path of large entries), whatever its size."""
    monkeypatch.setattr(range_read, "VIEW_BYTES_MIN", 1)


@pytest.mark.parametrize("views", [False, True], ids=["copied", "views"])
@pytest.mark.parametrize("size, batched", [(None, False), (100, False), (100, True)],
                         ids=["mixed lengths", "equal lengths", "equal lengths, crcs checked at once"])
def test_one_run_in_one_pread_matches_read_range(engine: BookieStorage, size: int | None, batched: bool, views: bool,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    if batched:
        monkeypatch.setattr(crc_batch, "PIECES_MIN", 1)
    if views:
        serve_as_views(monkeypatch)
    assert add_ids(engine, LG, range(500), size=size) == Status.OK
    before = engine.stats()["read_preads"]
    answer = read(engine, 0, 499)
    assert engine.stats()["read_preads"] - before == 1
    assert answer.count == 500 and runs_of(answer) == [(0, 499)] and answer.others == []
    # Views: one chunk per entry, none of them a copy; equal lengths copied: one chunk (a
    # strided copy); mixed lengths copied: one piece per entry (joined only into the response).
    chunks = answer.runs[0].chunks
    assert len(chunks) == (1 if size is not None and not views else 500)
    assert {type(c) for c in chunks} == {memoryview if views else bytes}
    assert entries_of(answer) == {e: payload(LG, e, size) for e in range(500)}
    assert answer.data_bytes == sum(len(payload(LG, e, size)) for e in range(500))
    _, results = engine.read_range(LG, 0, 499, 100_000, 2**30)
    assert [(r.entry_id, r.status, r.data) for r in results] == [
        (e, Status.OK, payload(LG, e, size)) for e in range(500)]


def test_a_run_crossing_a_gap_becomes_two_runs_and_the_gap_is_no_such_entry(engine: BookieStorage) -> None:
    assert add_ids(engine, LG, [*range(10), *range(15, 20)], size=64) == Status.OK
    answer = read(engine, 0, 24)
    assert answer.count == 25
    assert runs_of(answer) == [(0, 9), (15, 19)]
    assert answer.others == [(e, Status.NO_SUCH_ENTRY) for e in [*range(10, 15), *range(20, 25)]]
    assert entries_of(answer) == {e: payload(LG, e, 64) for e in [*range(10), *range(15, 20)]}


def test_striped_entries_are_one_pread_and_one_run_each(engine: BookieStorage) -> None:
    # E=3, W=2: this bookie holds e % 3 in (0, 1), back to back in its entry log.
    mine = [e for e in range(90) if e % 3 != 2]
    assert add_ids(engine, LG, mine) == Status.OK
    before = engine.stats()["read_preads"]
    answer = read(engine, 0, 89)
    assert engine.stats()["read_preads"] - before == 1
    assert runs_of(answer) == [(e, e + 1) for e in range(0, 90, 3)]
    assert [e for e, _ in answer.others] == list(range(2, 90, 3))
    assert entries_of(answer) == {e: payload(LG, e) for e in mine}


@pytest.mark.parametrize("size, batched", [(None, False), (200, False), (200, True)],
                         ids=["mixed lengths", "equal lengths", "equal lengths, crcs checked at once"])
@pytest.mark.parametrize("where", ["data", "header entry id", "header crc"])
@pytest.mark.parametrize("views", [False, True], ids=["copied", "views"])
def test_a_damaged_copy_in_the_middle_splits_the_run_and_is_unknown(
        tmp_path: Path, size: int | None, batched: bool, where: str, views: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if batched:  # the one-pass crc check of bookie.crc_batch, which 40 entries are too few for
        monkeypatch.setattr(crc_batch, "PIECES_MIN", 1)
    if views:
        serve_as_views(monkeypatch)
    engine = open_engine(tmp_path / "d")
    try:
        assert add_ids(engine, LG, range(40), size=size) == Status.OK
        victim = payload(LG, 17, size)
        # The at-rest header (40 bytes: scope, ledger, entry, lac, length, crc) precedes the data.
        flip(tmp_path / "d", victim, {"data": len(victim) // 2, "header entry id": -40 + 16,
                                      "header crc": -4}[where])
        corrupt_before = engine.stats()["corrupt_reads"]
        answer = read(engine, 0, 39)
        assert answer.count == 40
        assert runs_of(answer) == [(0, 16), (18, 39)]
        assert answer.others == [(17, Status.UNKNOWN_ENTRY_STATE)]
        assert [c.entry_id for c in answer.corrupt] == [17]
        assert engine.stats()["corrupt_reads"] - corrupt_before == 1
        assert entries_of(answer) == {e: payload(LG, e, size) for e in range(40) if e != 17}
        # The per-entry form says the same.
        _, results = engine.read_range(LG, 0, 39, 100, 2**30)
        assert [r.status for r in results] == [Status.OK] * 17 + [Status.UNKNOWN_ENTRY_STATE] + [Status.OK] * 22
    finally:
        engine.close()


@pytest.mark.parametrize("views", [False, True], ids=["copied", "views"])
@pytest.mark.parametrize("size", [None, 200], ids=["mixed lengths", "equal lengths"])
def test_an_entry_log_cut_short_makes_the_tail_unknown(tmp_path: Path, size: int | None, views: bool,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    if views:
        serve_as_views(monkeypatch)
    engine = open_engine(tmp_path / "d")
    try:
        assert add_ids(engine, LG, range(20), size=size) == Status.OK
        victim = payload(LG, 15, size)
        for path in entry_log_files(tmp_path / "d"):
            at = path.read_bytes().find(victim)
            if at >= 0:
                with open(path, "r+b") as f:
                    f.truncate(at + 3)
        answer = read(engine, 0, 19)
        assert runs_of(answer) == [(0, 14)]
        assert answer.others == [(e, Status.UNKNOWN_ENTRY_STATE) for e in range(15, 20)]
        assert entries_of(answer) == {e: payload(LG, e, size) for e in range(15)}
    finally:
        engine.close()


def test_a_failed_pread_makes_its_entries_unknown_and_is_logged(
        engine: BookieStorage, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    assert add_ids(engine, LG, range(10)) == Status.OK

    def failing(log_id: int, offset: int, size: int) -> bytes:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(engine._logs, "pread", failing)
    answer = read(engine, 0, 9)
    assert answer.runs == [] and answer.others == [(e, Status.UNKNOWN_ENTRY_STATE) for e in range(10)]
    assert any("entry log read failed" in r.message for r in caplog.records)


def test_count_and_byte_bounds(engine: BookieStorage) -> None:
    assert add(engine, LG, [(e, e - 1, bytes([e]) * 100) for e in range(50)]) == Status.OK
    assert read(engine, 10, 49, max_entries=7).count == 7
    answer = read(engine, 10, 49, max_bytes=350)  # 3 entries fit, the 4th would not
    assert answer.count == 3 and runs_of(answer) == [(10, 12)] and answer.data_bytes == 300
    answer = read(engine, 10, 49, max_bytes=10)  # the first entry always comes back
    assert answer.count == 1 and entries_of(answer) == {10: bytes([10]) * 100}
    answer = read(engine, 45, 60)  # past the end: ids the bookie never had
    assert runs_of(answer) == [(45, 49)] and [e for e, _ in answer.others] == list(range(50, 61))
    assert engine.read_runs(LG, 5, 4, 10, 100) == (Status.INVALID_REQUEST, None)
    assert engine.read_runs(LG, 0, 3, 0, 100) == (Status.INVALID_REQUEST, None)
    assert engine.read_runs((0, 404), 0, 3, 10, 100) == (Status.NO_SUCH_LEDGER, None)


def test_holes_count_no_bytes_against_the_bound(engine: BookieStorage) -> None:
    assert add(engine, LG, [(0, -1, b"a" * 100), (5, 4, b"b" * 100), (6, 5, b"c" * 100)]) == Status.OK
    answer = read(engine, 0, 9, max_bytes=250)
    assert answer.count == 6  # 0, holes 1..4, 5; entry 6 would pass 250 bytes
    assert runs_of(answer) == [(0, 0), (5, 5)]


@pytest.mark.parametrize("views", [False, True], ids=["copied", "views"])
def test_a_run_spans_several_preads_and_entry_log_files(tmp_path: Path, views: bool,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(range_read, "READ_PREAD_BYTES_MAX", 1000)  # 300-byte entries: ~3 per pread
    if views:
        serve_as_views(monkeypatch)
    engine = open_engine(tmp_path / "d", entry_log_max_bytes=8 * 1024)  # logs roll every ~8 KiB
    try:
        for first in range(0, 200, 20):
            assert add_ids(engine, LG, range(first, first + 20), size=300) == Status.OK
        assert len(entry_log_files(tmp_path / "d")) > 1
        before = engine.stats()["read_preads"]
        answer = read(engine, 0, 199)
        assert engine.stats()["read_preads"] - before >= 200 // 4
        assert runs_of(answer) == [(0, 199)]
        assert entries_of(answer) == {e: payload(LG, e, 300) for e in range(200)}
    finally:
        engine.close()


def test_uncertain_mode_answers_unknown_for_what_it_lacks(tmp_path: Path) -> None:
    engine = open_engine(tmp_path / "d")
    try:
        assert add_ids(engine, LG, [0, 1, 3]) == Status.OK
        engine._uncertain = True  # as after a repaired journal (covered in test_storage_journal)
        answer = read(engine, 0, 3)
        assert runs_of(answer) == [(0, 1), (3, 3)] and answer.others == [(2, Status.UNKNOWN_ENTRY_STATE)]
    finally:
        engine.close()
