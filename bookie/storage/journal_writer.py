"""Journal files and their writer: positions, file names, and the append-only writer.

Files are `<journal dir>/<seq:016x>.log`. A record never spans two files; the writer rolls
to the next sequence number between groups once a file reaches its size limit.

The writer preallocates the current file in chunks (fallocate), as BookKeeper's journal does:
an fdatasync after an append that grows the file must also commit the new size through the
file system's own journal (on this project's ext4 test machine: a median of ~115 us per sync of
a 1 KiB append, against ~80 us into preallocated space). So the last file may end in zeros that
were never written: replay (journal.py) treats an all-zero tail of the last file as its clean
end and cuts it off. A file is cut to its used length (and synced) before the next one is
created, and replay cuts the one a crash left, so a zero tail anywhere else is still damage.
"""

from __future__ import annotations

import logging
import mmap
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from bookie.storage.durable_files import fsync_dir, pwritev_all

log = logging.getLogger(__name__)
JOURNAL_SUFFIX = ".log"


class JournalPosition(NamedTuple):
    """A byte position in the journal: everything before it is covered. Orders as a tuple."""

    seq: int
    offset: int


def journal_path(directory: Path, seq: int) -> Path:
    return directory / f"{seq:016x}{JOURNAL_SUFFIX}"


def list_journal_seqs(directory: Path) -> list[int]:
    seqs = []
    for p in directory.glob("*" + JOURNAL_SUFFIX):
        try:
            seqs.append(int(p.stem, 16))
        except ValueError:
            log.warning("ignoring unexpected file in journal dir path=%s", p)
    return sorted(seqs)


def delete_journal_files_before(directory: Path, seq: int) -> int:
    """Delete journal files wholly covered by a checkpoint. Returns how many were deleted."""
    deleted = 0
    for s in list_journal_seqs(directory):
        if s < seq:
            journal_path(directory, s).unlink(missing_ok=True)
            deleted += 1
    if deleted:
        fsync_dir(directory)
    return deleted


# Preallocation step (BookKeeper's journalPreAllocSizeMB defaults to 16).
PREALLOCATE_BYTES = 16 * 2**20
# Synced journal bytes are dropped from the page cache once this many have piled up (one
# fadvise call per MiB, not per group). The journal is only read at replay, and a page the
# kernel already holds is far cheaper to write into than one it must newly take: on this
# project's VM test machine, writing into pages just freed runs at ~3 GB/s against ~0.3 GB/s
# into fresh ones (bench/spark_bench.py writes spent ~70% of bookie CPU on that copy).
PAGE_CACHE_DROP_BYTES = 2**20


class JournalWriter:
    """Appends groups to the current journal file. One writer at a time (the group committer
    serialises the journal thread and inline writers)."""

    def __init__(self, directory: Path, seq: int, file_max_bytes: int, fsync: bool) -> None:
        self._directory = directory
        self._file_max_bytes = file_max_bytes
        self._fsync = fsync
        self._preallocate = True
        self._seq = seq
        self._offset = 0
        self._allocated = 0
        self._dropped = 0  # the page cache holds nothing of this file before this offset
        self._fd = self._create(seq)

    def _create(self, seq: int) -> int:
        path = journal_path(self._directory, seq)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        self._allocated = 0
        # The new name must be durable before any record in it is acknowledged.
        if self._fsync:
            fsync_dir(self._directory)
        log.info("journal file opened path=%s", path)
        return fd

    @property
    def position(self) -> JournalPosition:
        return JournalPosition(self._seq, self._offset)

    def append(self, parts: Sequence[bytes | memoryview]) -> JournalPosition:
        """Write a whole group (its records' parts, back to back) at the end of the used part;
        returns the position after it."""
        end = self._offset + sum(map(len, parts))
        if end > self._allocated and self._preallocate:
            self._extend(end)
        pwritev_all(self._fd, parts, self._offset)
        self._offset = end
        return JournalPosition(self._seq, self._offset)

    def _extend(self, end: int) -> None:
        target = max(end, self._allocated + min(PREALLOCATE_BYTES, self._file_max_bytes))
        try:
            os.posix_fallocate(self._fd, self._allocated, target - self._allocated)
        except OSError as e:  # a file system without fallocate: plain appends still work
            log.warning("journal preallocation unavailable, appending without it error=%s", e)
            self._preallocate = False
            return
        self._allocated = target

    def sync(self) -> float:
        """fdatasync the current file; returns the seconds it took (0 when fsync is off)."""
        if not self._fsync:
            return 0.0
        start = time.perf_counter()
        os.fdatasync(self._fd)
        took = time.perf_counter() - start
        if self._offset - self._dropped >= PAGE_CACHE_DROP_BYTES:
            self._drop_synced_pages()
        return took

    def _drop_synced_pages(self) -> None:
        """Give the synced (clean) pages before the current offset back to the kernel: the
        whole pages only (the one holding the offset is written again by the next group)."""
        upto = self._offset - self._offset % mmap.PAGESIZE
        try:
            os.posix_fadvise(self._fd, self._dropped, upto - self._dropped, os.POSIX_FADV_DONTNEED)
        except OSError as e:  # only advice: a file system without it loses nothing
            log.debug("journal page cache drop failed error=%s", e)
        self._dropped = upto

    def maybe_roll(self) -> bool:
        """Start the next file once this one is full. Called between groups, after sync."""
        if self._offset < self._file_max_bytes:
            return False
        self._finish_file()
        self._seq += 1
        self._offset = 0
        self._dropped = 0
        self._fd = self._create(self._seq)
        return True

    def _finish_file(self) -> None:
        """Cut the preallocated tail off (durably, before any later file exists) and close."""
        if self._allocated > self._offset:
            os.ftruncate(self._fd, self._offset)
            if self._fsync:
                os.fdatasync(self._fd)
        os.close(self._fd)
        self._fd = -1

    def close(self) -> None:
        if self._fd < 0:
            return
        try:
            self._finish_file()
        except OSError as e:  # e.g. after a failed journal: replay cuts the tail instead
            log.warning("journal close could not cut the preallocated tail error=%s", e)
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
