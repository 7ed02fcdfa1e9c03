"""Damaged storage: torn journal tails, corruption in the middle of the journal, repair into
uncertain mode, corrupt entries in the entry log, damaged checkpoint files."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from bookie.status import Status
from bookie.storage import BookieStorage, CheckpointCorruptionError, JournalCorruptionError
from bookie.storage.index_store import STORE_NAME
from bookie.storage.records import JOURNAL_MAGIC, RECORD_HEADER, RECORD_HEADER_BYTES
from tests.bookie.test_storage_support import (
    add_ids,
    crash_copy,
    entry_log_files,
    journal_files,
    open_engine,
    payload,
    read_all_ok,
)

LG = (3, 0xFEED)


def record_offsets(path: Path) -> list[tuple[int, int]]:
    """(offset, total length) of each record in a journal file (up to its preallocated zeros)."""
    raw = path.read_bytes()
    out = []
    pos = 0
    while pos + RECORD_HEADER_BYTES <= len(raw):
        magic, body_len, _crc = RECORD_HEADER.unpack_from(raw, pos)
        if magic != JOURNAL_MAGIC:
            break
        out.append((pos, RECORD_HEADER_BYTES + body_len))
        pos += RECORD_HEADER_BYTES + body_len
    return out


def flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x5A]))


def crashed_with_batches(tmp_path: Path, batches: int, **opts) -> Path:
    """A crash image after `batches` acknowledged batches of 10 entries (ids 10*i ..)."""
    engine = open_engine(tmp_path / "live", **opts)
    try:
        for i in range(batches):
            assert add_ids(engine, LG, range(10 * i, 10 * i + 10)) == Status.OK
        return crash_copy(tmp_path / "live", tmp_path / "crashed")
    finally:
        engine.close()


@pytest.mark.parametrize("cut", ["mid body", "mid header", "zero fill"])
def test_torn_tail_is_dropped_with_a_warning_and_the_rest_survives(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, cut: str
) -> None:
    data_dir = crashed_with_batches(tmp_path, 5)
    [journal] = journal_files(data_dir)
    offset, length = record_offsets(journal)[-1]  # the last batch: never acknowledged, say
    if cut == "mid body":
        size = offset + length // 2
        with open(journal, "r+b") as f:
            f.truncate(size)
    elif cut == "mid header":
        with open(journal, "r+b") as f:
            f.truncate(offset + 5)
    else:  # a power cut can leave zeroed blocks after the last complete record
        with open(journal, "r+b") as f:
            f.truncate(offset)
            f.seek(offset)
            f.write(bytes(4096))
    caplog.set_level(logging.WARNING, logger="bookie.storage")
    engine = open_engine(data_dir)
    try:
        torn = [r for r in caplog.records if "torn tail" in r.getMessage()]
        if cut == "zero fill":
            # Zeros ending the last file look exactly like its preallocated, unused space: the
            # clean end of the journal, so no warning (the data outcome is the same).
            assert torn == []
        else:
            assert len(torn) == 1 and str(journal) in torn[0].getMessage()
            assert f"offset={offset}" in torn[0].getMessage()
        read_all_ok(engine, LG, range(40))
        status, results = engine.read_range(LG, 40, 49, 100, 2**20)
        assert status == Status.OK and {r.status for r in results} == {Status.NO_SUCH_ENTRY}
        assert not engine.uncertain
    finally:
        engine.close()
    caplog.clear()
    open_engine(data_dir).close()  # the damage was truncated and trimmed: no second warning
    assert not [r for r in caplog.records if "torn tail" in r.getMessage()]


def test_corrupt_record_in_the_middle_refuses_to_open_naming_file_and_offset(tmp_path: Path) -> None:
    data_dir = crashed_with_batches(tmp_path, 5)
    [journal] = journal_files(data_dir)
    offset, length = record_offsets(journal)[2]  # batch 1 (record 0 is the master key)
    flip_byte(journal, offset + length - 3)  # inside entry data: only the crc notices
    with pytest.raises(JournalCorruptionError) as err:
        open_engine(data_dir)
    assert err.value.path == journal and err.value.offset == offset
    message = str(err.value)
    assert str(journal) in message and f"offset={offset}" in message and "repair_journal" in message


def test_corrupt_last_record_of_an_earlier_file_is_middle_corruption(tmp_path: Path) -> None:
    # Tiny journal files: one batch per file, so the damaged record ends its file and valid
    # records follow in the next files.
    data_dir = crashed_with_batches(tmp_path, 6, journal_file_max_bytes=256)
    files = journal_files(data_dir)
    assert len(files) >= 5
    damaged = files[1]
    offset, _length = record_offsets(damaged)[-1]
    with open(damaged, "r+b") as f:
        f.truncate(offset + 20)  # looks like a torn tail, but later files hold valid records
    with pytest.raises(JournalCorruptionError) as err:
        open_engine(data_dir)
    assert err.value.path == damaged and err.value.offset == offset


def test_repair_skips_the_record_and_enters_persistent_uncertain_mode(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data_dir = crashed_with_batches(tmp_path, 5)
    [journal] = journal_files(data_dir)
    offset, _ = record_offsets(journal)[2]  # batch 1: entries 10..19
    flip_byte(journal, offset + RECORD_HEADER_BYTES + 30)
    caplog.set_level(logging.ERROR, logger="bookie.storage")
    engine = open_engine(data_dir, repair_journal=True)
    try:
        assert engine.uncertain
        assert any("skipped by repair" in r.getMessage() and f"offset={offset}" in r.getMessage()
                   for r in caplog.records)
        read_all_ok(engine, LG, [*range(10), *range(20, 50)])
        # What the bookie does not have may have been acknowledged: never say "no such".
        assert engine.read_entry(LG, 15).status == Status.UNKNOWN_ENTRY_STATE
        assert engine.read_entry(LG, 50).status == Status.UNKNOWN_ENTRY_STATE
        assert engine.read_range((0, 404), 0, 5, 10, 2**20) == (Status.UNKNOWN_ENTRY_STATE, [])
        assert engine.read_entry((0, 404), 0).status == Status.UNKNOWN_ENTRY_STATE
        assert engine.read_lac((0, 404)) == (Status.UNKNOWN_ENTRY_STATE, -1)
        assert add_ids(engine, LG, range(50, 60)) == Status.OK  # still serves writes
    finally:
        engine.close()
    engine = open_engine(data_dir)  # no repair flag needed any more, but still uncertain
    try:
        assert engine.uncertain
        assert engine.read_entry(LG, 15).status == Status.UNKNOWN_ENTRY_STATE
        engine.clear_uncertain()
        assert not engine.uncertain
        assert engine.read_entry(LG, 15).status == Status.NO_SUCH_ENTRY
    finally:
        engine.close()
    engine = open_engine(data_dir)
    try:
        assert not engine.uncertain
        read_all_ok(engine, LG, range(50, 60))
    finally:
        engine.close()


def test_missing_journal_file_refuses_to_open(tmp_path: Path) -> None:
    data_dir = crashed_with_batches(tmp_path, 6, journal_file_max_bytes=256)
    files = journal_files(data_dir)
    files[2].unlink()
    with pytest.raises(JournalCorruptionError, match="not contiguous"):
        open_engine(data_dir)


def find_in_entry_logs(data_dir: Path, needle: bytes) -> tuple[Path, int]:
    for path in entry_log_files(data_dir):
        at = path.read_bytes().find(needle)
        if at >= 0:
            return path, at
    raise AssertionError("payload not found in any entry log")


@pytest.fixture
def engine_with_entries(tmp_path: Path):
    engine = open_engine(tmp_path / "d")
    assert add_ids(engine, LG, range(20), size=200) == Status.OK
    try:
        yield engine, tmp_path / "d"
    finally:
        engine.close()


def test_flipped_byte_in_stored_entry_data_is_unknown_not_missing(engine_with_entries) -> None:
    engine, data_dir = engine_with_entries
    path, at = find_in_entry_logs(data_dir, payload(LG, 5, 200))
    flip_byte(path, at + 100)
    r = engine.read_entry(LG, 5)
    assert (r.status, r.data) == (Status.UNKNOWN_ENTRY_STATE, b"")
    status, results = engine.read_range(LG, 0, 19, 100, 2**20)
    assert status == Status.OK
    assert [r.status for r in results] == [Status.OK] * 5 + [Status.UNKNOWN_ENTRY_STATE] + [Status.OK] * 14
    assert all(r.data == payload(LG, r.entry_id, 200) for r in results if r.entry_id != 5)
    assert engine.stats()["corrupt_reads"] == 2


def test_flipped_byte_in_a_stored_entry_header_is_unknown(engine_with_entries) -> None:
    engine, data_dir = engine_with_entries
    path, at = find_in_entry_logs(data_dir, payload(LG, 7, 200))
    flip_byte(path, at - 40 + 16)  # the entry id field of entry 7's header
    assert engine.read_entry(LG, 7).status == Status.UNKNOWN_ENTRY_STATE
    flip_byte(path, at - 4)  # entry 7's stored crc too: still unknown, never the bytes
    assert engine.read_entry(LG, 7).status == Status.UNKNOWN_ENTRY_STATE
    read_all_ok(engine, LG, [*range(7), *range(8, 20)], size=200)


def test_entry_log_cut_short_is_unknown(engine_with_entries) -> None:
    engine, data_dir = engine_with_entries
    path, at = find_in_entry_logs(data_dir, payload(LG, 19, 200))
    with open(path, "r+b") as f:
        f.truncate(at + 50)
    assert engine.read_entry(LG, 19).status == Status.UNKNOWN_ENTRY_STATE
    read_all_ok(engine, LG, range(19), size=200)


def test_damaged_checkpoint_files_refuse_to_open(tmp_path: Path) -> None:
    engine = open_engine(tmp_path / "d")
    assert add_ids(engine, LG, range(10)) == Status.OK
    engine.close()
    store = tmp_path / "d" / "ledgers" / STORE_NAME

    def flip_row_byte() -> None:
        with sqlite3.connect(store) as db:
            [(key, body)] = db.execute("SELECT key, body FROM ledgers").fetchall()
            body = bytearray(body)
            body[30] ^= 0xFF
            db.execute("UPDATE ledgers SET body = ? WHERE key = ?", (bytes(body), key))

    flip_row_byte()
    with pytest.raises(CheckpointCorruptionError) as err:
        open_engine(tmp_path / "d")
    assert err.value.path is not None and str(err.value.path).startswith(str(store))
    assert "checksum" in str(err.value)
    flip_row_byte()  # undo
    open_engine(tmp_path / "d").close()
    flip_byte(tmp_path / "d" / "CHECKPOINT", 10)
    with pytest.raises(CheckpointCorruptionError):
        open_engine(tmp_path / "d")


def test_uncertain_engine_type_is_the_public_one(tmp_path: Path) -> None:
    engine = open_engine(tmp_path / "d")
    try:
        assert isinstance(engine, BookieStorage) and not engine.uncertain
    finally:
        engine.close()


# ---- preallocation ------------------------------------------------------------------------------


def test_journal_is_preallocated_and_cut_to_its_used_length_on_roll_and_close(tmp_path: Path) -> None:
    from bookie.storage.journal import PREALLOCATE_BYTES, JournalWriter, journal_path

    tmp_path.mkdir(exist_ok=True)
    writer = JournalWriter(tmp_path, 0, file_max_bytes=64 * 2**20, fsync=True)
    writer.append([b"a" * 100])
    writer.sync()
    first = journal_path(tmp_path, 0)
    # Room is reserved ahead of the data, so a sync after an append need not grow the file.
    assert first.stat().st_size == PREALLOCATE_BYTES and writer.position.offset == 100
    writer.close()
    assert first.read_bytes() == b"a" * 100

    small = JournalWriter(tmp_path, 1, file_max_bytes=1000, fsync=True)
    small.append([b"b" * 600])
    assert not small.maybe_roll()
    small.append([b"c" * 600])  # past the limit: the next roll starts file 2
    assert journal_path(tmp_path, 1).stat().st_size >= 1200
    assert small.maybe_roll()
    assert journal_path(tmp_path, 1).read_bytes() == b"b" * 600 + b"c" * 600  # cut before file 2 exists
    small.close()
    assert journal_path(tmp_path, 2).stat().st_size == 0


def test_engine_restarts_cleanly_over_a_preallocated_tail_and_keeps_appending(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data_dir = crashed_with_batches(tmp_path, 3)
    [journal] = journal_files(data_dir)
    used = sum(length for _, length in record_offsets(journal))
    assert journal.stat().st_size > used  # the crash image still has the unused zeros
    caplog.set_level(logging.WARNING, logger="bookie.storage")
    engine = open_engine(data_dir)
    try:
        assert not [r for r in caplog.records if "torn" in r.getMessage() or "corrupt" in r.getMessage()]
        read_all_ok(engine, LG, range(30))
        assert add_ids(engine, LG, range(30, 40)) == Status.OK
    finally:
        engine.close()
    engine = open_engine(data_dir)
    try:
        read_all_ok(engine, LG, range(40))
    finally:
        engine.close()


def test_replay_cuts_the_zero_tail_so_a_later_file_does_not_make_it_damage(tmp_path: Path) -> None:
    """A crash leaves the current file with unused zeros; replay cuts them. Records then written
    to the next file (had no checkpoint deleted the old one yet) must not make those zeros read
    as damage in the middle on the replay after that."""
    from bookie.storage import records
    from bookie.storage.journal import JournalPosition, JournalWriter, replay_journal

    data_dir = crashed_with_batches(tmp_path, 3)
    journal_dir = data_dir / "journal"
    [old] = journal_files(data_dir)
    used = sum(length for _, length in record_offsets(old))
    start = JournalPosition(int(old.stem, 16), 0)
    first = replay_journal(journal_dir, start, repair=False, fsync=False, handle=lambda body: None)
    assert old.stat().st_size == used and first.truncated == []
    writer = JournalWriter(journal_dir, first.last_seq + 1, 64 * 2**20, fsync=False)
    writer.append(records.encode_master_key(LG[0], LG[1], b"k" * 20))
    writer.close()
    second = replay_journal(journal_dir, start, repair=False, fsync=False, handle=lambda body: None)
    assert second.records == first.records + 1 and second.skipped == []


def test_zeros_ending_a_file_that_is_not_the_last_are_damage(tmp_path: Path) -> None:
    """Files are cut to length before the next one is created, so zeros after the records of an
    earlier file mean lost data there (a lost page reads as zeros), never unused space."""
    from bookie.storage.journal import JournalPosition, journal_path, replay_journal

    data_dir = crashed_with_batches(tmp_path, 6, journal_file_max_bytes=256)
    files = journal_files(data_dir)
    assert len(files) >= 3
    victim = files[1]
    offset, length = record_offsets(victim)[-1]
    with open(victim, "r+b") as f:  # its last record's blocks came back as zeros
        f.seek(offset)
        f.write(bytes(length))
    with pytest.raises(JournalCorruptionError) as err:
        replay_journal(data_dir / "journal", JournalPosition(int(files[0].stem, 16), 0), repair=False,
                       fsync=False, handle=lambda body: None)
    assert str(victim) in str(err.value) and f"offset={offset}" in str(err.value)
    assert journal_path(data_dir / "journal", int(victim.stem, 16)) == victim


def test_synced_journal_pages_are_given_back_a_mib_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The journal is read only at replay: after an fdatasync, whole synced pages are dropped
    from the page cache (once at least PAGE_CACHE_DROP_BYTES piled up), never the unsynced."""
    import mmap

    from bookie.storage import journal as journal_module

    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(journal_module.os, "posix_fadvise",
                        lambda fd, offset, length, advice: calls.append((offset, length)))
    writer = journal_module.JournalWriter(tmp_path, 0, file_max_bytes=64 * 2**20, fsync=True)
    step = journal_module.PAGE_CACHE_DROP_BYTES // 3 + 1
    writer.append([b"x" * step])
    writer.sync()
    writer.append([b"y" * step])
    writer.append([b"z" * step])
    assert calls == []  # written but not yet synced, or too little: nothing dropped
    writer.sync()
    page = mmap.PAGESIZE
    assert calls == [(0, 3 * step // page * page)]
    writer.append([b"w" * journal_module.PAGE_CACHE_DROP_BYTES])
    writer.sync()
    end = (3 * step + journal_module.PAGE_CACHE_DROP_BYTES) // page * page
    assert calls[1] == (calls[0][1], end - calls[0][1])  # from where the last drop ended
    writer.close()
    assert journal_module.journal_path(tmp_path, 0).read_bytes()[:step] == b"x" * step
