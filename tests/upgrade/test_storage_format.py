"""On-disk format versions (bookie/storage/format_version.py), in-process: the directory marker,
journal record versions and which format a bookie writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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
