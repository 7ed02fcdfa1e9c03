"""Small durable-file primitives: full writes, atomic replace, directory fsync."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

TMP_SUFFIX = ".tmp"
# Buffers per pwritev call (Linux's IOV_MAX is 1024).
IOV_MAX = max(16, os.sysconf("SC_IOV_MAX"))


def write_all(fd: int, data: bytes | memoryview) -> None:
    """os.write until every byte is written (regular files can return short counts)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def pwritev_all(fd: int, parts: Sequence[bytes | memoryview], offset: int) -> int:
    """Write the parts back to back from `offset`, every byte (regular files can return short
    counts), without joining them first: a group of large entries would otherwise be copied
    once more in user space. Returns the bytes written."""
    views = [memoryview(p) for p in parts if len(p)]
    total, at = 0, 0  # views[at:] are still to write
    while at < len(views):
        written = os.pwritev(fd, views[at:at + IOV_MAX], offset)
        total += written
        offset += written
        while at < len(views) and written >= len(views[at]):  # skip what was written whole
            written -= len(views[at])
            at += 1
        if written:
            views[at] = views[at][written:]
    return total


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
