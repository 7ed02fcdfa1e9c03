"""Small durable-file primitives: full writes, atomic replace, directory fsync."""

from __future__ import annotations

import os
from pathlib import Path

TMP_SUFFIX = ".tmp"


def write_all(fd: int, data: bytes | memoryview) -> None:
    """os.write until every byte is written (regular files can return short counts)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def pwrite_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


def fsync_dir(path: Path) -> None:
    """Make creations, renames and deletions inside `path` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_tmp_synced(path: Path, data: bytes, fsync: bool) -> Path:
    """Write `data` to `path`.tmp and fsync it; the caller renames (possibly in bulk)."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    return tmp


def atomic_write(path: Path, data: bytes, fsync: bool = True) -> None:
    """Replace `path` with `data` so a crash leaves either the old or the new content."""
    tmp = write_tmp_synced(path, data, fsync)
    os.replace(tmp, path)
    if fsync:
        fsync_dir(path.parent)


def remove_tmp_files(directory: Path) -> int:
    """Remove leftovers of writes interrupted by a crash; returns how many."""
    removed = 0
    for p in directory.glob("*" + TMP_SUFFIX):
        p.unlink(missing_ok=True)
        removed += 1
    return removed
