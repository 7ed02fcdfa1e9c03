"""The on-disk format version of a bookie's directories and of its journal records.

Format 1 is release 0.1.0's: no marker file, and journal records whose body byte 1 is padding
(zero; records.py). Format 2 adds the versions themselves: a marker file FORMAT_VERSION in each
directory the bookie stores in (JSON: the version and the release that raised it), and each
journal record's version in that body byte. Nothing else changes, so format-2 data reads in
format-1 code paths; what it buys is that from now on a bookie refuses, naming both versions,
a directory or a record newer than it reads, instead of misreading it or taking it for damage.

A bookie writes the newest format the cluster setting `storage_format_version` allows
(metadata/cluster_settings.py; default 1: exactly what the previous release writes, so a bookie
can still be downgraded) and this code supports. Turning the setting up raises the marker first
(durably), then the records follow. A marker never goes down: data of that format may exist.
docs/upgrading.md, "On-disk formats".
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

from bookie.proto.versions import RELEASE
from bookie.storage.durable_files import fsync_dir, write_tmp_synced
from bookie.storage.errors import StorageError, ensure

FORMAT_MARKER_NAME = "FORMAT_VERSION"
# The formats this code reads; it writes any of them (the cluster setting chooses).
FORMAT_VERSION_MIN = 1
FORMAT_VERSION_MAX = 2
# A directory without a marker was written in format 1 (release 0.1.0, or never raised since).
UNMARKED_FORMAT = 1
# Journal records: the version sits in body byte 1, padding (zero) in format 1.
RECORD_VERSION_OFFSET = 1
MARKER_BYTES_MAX = 4096

log = logging.getLogger(__name__)


class StorageFormatError(StorageError):
    """A directory or record of a format this code does not read; names both versions."""


def read_format(directory: Path) -> int:
    """The format a directory's marker names (UNMARKED_FORMAT without one)."""
    path = directory / FORMAT_MARKER_NAME
    try:
        data = path.read_bytes()[:MARKER_BYTES_MAX]
    except FileNotFoundError:
        return UNMARKED_FORMAT
    try:
        version = json.loads(data)["format_version"]
    except (ValueError, KeyError, TypeError) as exc:
        raise StorageFormatError(f"{path} is not a format marker ({exc}): restore it or report it") from exc
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise StorageFormatError(f"{path} names format {version!r}, not a format version")
    return version


def check_readable(directory: Path) -> int:
    """The directory's format; StorageFormatError naming both versions when it is newer than
    this code reads (a downgrade after the new format was turned on)."""
    version = read_format(directory)
    if version > FORMAT_VERSION_MAX:
        raise StorageFormatError(
            f"{directory} holds on-disk format version {version}, but this bookie (release {RELEASE}) reads "
            f"formats {FORMAT_VERSION_MIN} to {FORMAT_VERSION_MAX}: it was written by a newer release after "
            f"storage_format_version was raised. Start that release (or a newer one) on it; going back is "
            f"not possible once a newer format is written (docs/upgrading.md).")
    return version


def raise_format(directory: Path, version: int, fsync: bool) -> None:
    """Mark the directory as holding `version` (durably, atomically); never lowers a marker."""
    ensure(FORMAT_VERSION_MIN <= version <= FORMAT_VERSION_MAX, f"format {version} is not one this code writes")
    if read_format(directory) >= version:
        return
    path = directory / FORMAT_MARKER_NAME
    tmp = write_tmp_synced(path, json.dumps({"format_version": version, "raised_by": RELEASE}).encode(), fsync)
    os.replace(tmp, path)
    if fsync:
        fsync_dir(directory)


def record_version_byte(format_version: int) -> int:
    """What body byte 1 of a journal record holds when written in `format_version`."""
    ensure(FORMAT_VERSION_MIN <= format_version <= FORMAT_VERSION_MAX, f"format {format_version} is not one this code writes")
    return 0 if format_version == 1 else format_version


def check_record_version(body: memoryview | bytes, where: str) -> None:
    """Refuse a journal record of a newer format than this code reads (replay: before decoding)."""
    if len(body) <= RECORD_VERSION_OFFSET:
        return  # too short to be any record: the decoder says what is wrong with it
    version = body[RECORD_VERSION_OFFSET]
    if version > FORMAT_VERSION_MAX:
        raise StorageFormatError(
            f"journal record at {where} is of on-disk format version {version}, but this bookie (release "
            f"{RELEASE}) reads formats {FORMAT_VERSION_MIN} to {FORMAT_VERSION_MAX}: it was written by a newer "
            f"release. Start that release (or a newer one) on this data; do not delete the journal.")


def effective_write_format(setting: int, marked: int) -> int:
    """The format to write: what the cluster setting asks for, capped at what this code writes,
    and never below what a directory is already marked with."""
    return max(min(max(setting, FORMAT_VERSION_MIN), FORMAT_VERSION_MAX), min(marked, FORMAT_VERSION_MAX))


class FormatState:
    """The format one storage engine writes: its directories' markers, and the version byte its
    journal records carry (`record_version`, read without a lock on the add path)."""

    def __init__(self, directories: list[Path], fsync: bool) -> None:
        """Refuses (StorageFormatError) a directory of a newer format than this code reads."""
        ensure(bool(directories), "a storage has at least one directory")
        self._directories = directories
        self._fsync = fsync
        self._lock = threading.Lock()
        self.marked = max(check_readable(d) for d in directories)
        # Until the cluster setting is applied (follow), what the directories already hold.
        self.writes = self.marked
        self.record_version = record_version_byte(self.writes)

    def follow(self, setting: int) -> int:
        """Apply the cluster setting storage_format_version: the format written from now on.
        A higher format is marked in every directory (durably) before any record of it is written."""
        with self._lock:
            target = effective_write_format(setting, self.marked)
            if target > self.marked:
                for d in self._directories:
                    raise_format(d, target, self._fsync)
                log.warning("on-disk format raised directories=%s format=%d (an older release can no longer open them)",
                            [str(d) for d in self._directories], target)
                self.marked = target
            self.writes = target
            self.record_version = record_version_byte(target)
            return target
