"""On-disk format versions (bookie/storage/format_version.py), in-process: the directory marker,
journal record versions and which format a bookie writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from crc32c import crc32c

from bookie.status import Status
from bookie.storage.format_version import (
    FORMAT_MARKER_NAME,
    FORMAT_VERSION_MAX,
    RECORD_VERSION_OFFSET,
    StorageFormatError,
    check_readable,
    check_record_version,
    effective_write_format,
    raise_format,
    read_format,
    record_version_byte,
)
from bookie.storage.records import JOURNAL_MAGIC, RECORD_HEADER, RECORD_HEADER_BYTES
from pyspark_ledger.testing.local_cluster import LocalBookie
from tests.bookie.test_storage_support import KEY, add_ids, crash_copy, journal_files, open_engine, read_all_ok


def test_an_unmarked_directory_is_format_1_and_a_marker_only_goes_up(tmp_path: Path) -> None:
    assert read_format(tmp_path) == 1 == check_readable(tmp_path)
    raise_format(tmp_path, 2, fsync=True)
    assert read_format(tmp_path) == 2
    assert json.loads((tmp_path / FORMAT_MARKER_NAME).read_text())["format_version"] == 2
    raise_format(tmp_path, 1, fsync=True)  # never lowered: format-2 data may exist
    assert read_format(tmp_path) == 2 == check_readable(tmp_path)
    assert not list(tmp_path.glob("*.tmp"))


def test_a_directory_of_a_newer_format_is_refused_naming_both_versions(tmp_path: Path) -> None:
    (tmp_path / FORMAT_MARKER_NAME).write_text(json.dumps({"format_version": FORMAT_VERSION_MAX + 1}))
    with pytest.raises(StorageFormatError, match=f"on-disk format version {FORMAT_VERSION_MAX + 1}, but this bookie "
                                                 rf"\(release .*\) reads formats 1 to {FORMAT_VERSION_MAX}"):
        check_readable(tmp_path)


@pytest.mark.parametrize("content", ["", "{", '{"format": 2}', '{"format_version": "2"}', '{"format_version": 0}',
                                     '{"format_version": true}'])
def test_a_damaged_marker_is_refused_by_name(tmp_path: Path, content: str) -> None:
    (tmp_path / FORMAT_MARKER_NAME).write_text(content)
    with pytest.raises(StorageFormatError, match=FORMAT_MARKER_NAME):
        read_format(tmp_path)


def test_journal_records_carry_their_version_in_a_byte_format_1_leaves_zero() -> None:
    assert record_version_byte(1) == 0 and record_version_byte(2) == 2
    for version in (0, 2):
        body = bytearray(24)
        body[RECORD_VERSION_OFFSET] = version
        check_record_version(body, "journal 0 offset 0")  # readable
    newer = bytearray(24)
    newer[RECORD_VERSION_OFFSET] = FORMAT_VERSION_MAX + 1
    with pytest.raises(StorageFormatError, match=f"journal record at journal 7 offset 9 is of on-disk format version "
                                                 f"{FORMAT_VERSION_MAX + 1}"):
        check_record_version(newer, "journal 7 offset 9")


@pytest.mark.parametrize(("setting", "marked", "writes"), [
    (1, 1, 1),  # the default: what the previous release writes
    (2, 1, 2),  # turned on
    (1, 2, 2),  # turned off again: a marked directory keeps its format
    (9, 1, FORMAT_VERSION_MAX),  # a newer release's setting: the newest this code writes
])
def test_the_format_written_follows_the_setting_never_below_the_marker(setting: int, marked: int, writes: int) -> None:
    assert effective_write_format(setting, marked) == writes


# ---- the engine: formats written, markers, refusals -------------------------------------------------

LG = (0, 0x5EED)


def journal_records(data_dir: Path) -> list[tuple[Path, int, bytes]]:
    """(file, offset, body) of every record in the journal files, in order (up to preallocated zeros)."""
    out = []
    for path in journal_files(data_dir):
        raw = path.read_bytes()
        pos = 0
        while pos + RECORD_HEADER_BYTES <= len(raw):
            magic, body_len, _crc = RECORD_HEADER.unpack_from(raw, pos)
            if magic != JOURNAL_MAGIC:
                break
            out.append((path, pos, raw[pos + RECORD_HEADER_BYTES:pos + RECORD_HEADER_BYTES + body_len]))
            pos += RECORD_HEADER_BYTES + body_len
    return out


def test_the_engine_writes_format_1_until_told_then_marks_first_and_versions_its_records(tmp_path: Path) -> None:
    live = tmp_path / "live"
    engine = open_engine(live)
    try:
        assert add_ids(engine, LG, range(10)) == Status.OK
        assert engine.stats()["format_version"] == 1 and not (live / FORMAT_MARKER_NAME).exists()
        # Format 1 is byte for byte what release 0.1.0 writes: the version byte is its zero padding.
        assert [body[RECORD_VERSION_OFFSET] for _, _, body in journal_records(live)] == [0, 0]  # MASTER_KEY, ADD_BATCH
        assert engine.set_write_format(2) == 2
        assert read_format(live) == 2 and engine.stats()["format_version"] == 2
        assert add_ids(engine, LG, range(10, 20)) == Status.OK
        assert engine.fence(LG, KEY)[0] == Status.OK
        assert [body[RECORD_VERSION_OFFSET] for _, _, body in journal_records(live)] == [0, 0, 2, 2]
        assert engine.set_write_format(1) == 2  # a marked directory keeps its format
        crashed = crash_copy(live, tmp_path / "crashed")
    finally:
        engine.close()
    reopened = open_engine(crashed)  # replays records of both formats
    try:
        read_all_ok(reopened, LG, range(20))
        assert reopened.ledger_state(LG).fenced
        assert reopened.stats()["format_version"] == 2
    finally:
        reopened.close()


def test_a_journal_record_of_a_newer_format_refuses_the_open_naming_it(tmp_path: Path) -> None:
    engine = open_engine(tmp_path / "live")
    try:
        assert add_ids(engine, LG, range(10)) == Status.OK
        crashed = crash_copy(tmp_path / "live", tmp_path / "crashed")
    finally:
        engine.close()
    path, offset, body = journal_records(crashed)[-1]
    newer = bytearray(body)
    newer[RECORD_VERSION_OFFSET] = FORMAT_VERSION_MAX + 1
    with open(path, "r+b") as f:  # a valid record (checksum and all) of a later release
        f.seek(offset)
        f.write(RECORD_HEADER.pack(JOURNAL_MAGIC, len(newer), crc32c(bytes(newer))) + bytes(newer))
    with pytest.raises(StorageFormatError, match=f"journal record at file={path} offset={offset} is of on-disk "
                                                 f"format version {FORMAT_VERSION_MAX + 1}"):
        open_engine(crashed)


def test_a_data_dir_of_a_newer_format_refuses_the_open_and_the_bookie_says_why(tmp_path: Path) -> None:
    data = tmp_path / "data"
    bookie = LocalBookie(f"sqlite://{tmp_path / 'metadata.db'}", data).start()  # its cookie, its data
    assert bookie.stop() == 0
    # A later release raised the format of this directory, and then this release is started on it.
    (data / FORMAT_MARKER_NAME).write_text(json.dumps({"format_version": FORMAT_VERSION_MAX + 1}))
    with pytest.raises(StorageFormatError, match=f"holds on-disk format version {FORMAT_VERSION_MAX + 1}"):
        open_engine(data)
    code, log = bookie.run_to_exit()
    assert code == 1 and f"holds on-disk format version {FORMAT_VERSION_MAX + 1}, but this bookie" in log, log[-2000:]
