"""Journal files: the append-only writer and the replay scanner.

Files are `<journal dir>/<seq:016x>.log`. A record never spans two files; the writer rolls
to the next sequence number between groups once a file reaches its size limit.

The writer preallocates the current file in chunks (fallocate), as BookKeeper's journal does:
an fdatasync after an append that grows the file must also commit the new size through the
file system's own journal (on this project's ext4 test machine: a median of ~115 us per sync of
a 1 KiB append, against ~80 us into preallocated space). So the last file may end in zeros that
were never written: replay treats an all-zero tail of the last file as its clean end and cuts it
off. A file is cut to its used length (and synced) before the next one is created, and replay
cuts the one a crash left, so a zero tail anywhere else is still damage.
"""

from __future__ import annotations

import logging
import mmap
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from crc32c import crc32c

from bookie.storage.durable_files import fsync_dir, fsync_path, pwritev_all
from bookie.storage.errors import JournalCorruptionError, RecordFormatError, ensure
from bookie.storage.records import JOURNAL_MAGIC, MAGIC_BYTES, RECORD_HEADER, RECORD_HEADER_BYTES

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


# --------------------------------------------------------------------------------------------
# Replay


@dataclass
class ReplayOutcome:
    end: JournalPosition  # just after the last valid record replayed
    last_seq: int  # highest journal file sequence number present (-1 if none)
    records: int = 0
    truncated: list[str] = field(default_factory=list)  # "path@offset" of dropped tails
    skipped: list[str] = field(default_factory=list)  # "path@offset" of repaired (skipped) records


RecordHandler = Callable[[memoryview], None]


def _valid_record_at(buf: mmap.mmap | bytes, pos: int, size: int) -> int:
    """Body length of a complete, checksummed record at `pos`, or -1."""
    if size - pos < RECORD_HEADER_BYTES:
        return -1
    magic, body_len, crc = RECORD_HEADER.unpack_from(buf, pos)
    body_len = int(body_len)
    if magic != JOURNAL_MAGIC or body_len == 0:
        return -1
    end = pos + RECORD_HEADER_BYTES + body_len
    if end > size:
        return -1
    with memoryview(buf) as view:
        if crc32c(view[pos + RECORD_HEADER_BYTES : end]) != crc:
            return -1
    return body_len


def _find_valid_record(buf: mmap.mmap | bytes, start: int, size: int) -> int:
    """Offset of the first valid record at or after `start`, or -1. Only used after damage."""
    pos = start
    while True:
        pos = buf.find(MAGIC_BYTES, pos, size)
        if pos < 0:
            return -1
        if _valid_record_at(buf, pos, size) >= 0:
            return pos
        pos += 1


class _MappedFile:
    """A read-only view of one journal file (empty files are not mappable)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = open(path, "rb")
        self.size = os.fstat(self._file.fileno()).st_size
        self.buf: mmap.mmap | bytes = (
            mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ) if self.size else b""
        )

    def close(self) -> None:
        if isinstance(self.buf, mmap.mmap):
            self.buf.close()
        self._file.close()


def _next_valid_after(
    directory: Path, seqs: list[int], index: int, current: _MappedFile, start: int
) -> tuple[int, int] | None:
    """(file index, offset) of the first valid record after a damaged spot, searching the rest
    of the current file, then every later file."""
    pos = _find_valid_record(current.buf, start, current.size)
    if pos >= 0:
        return index, pos
    for later in range(index + 1, len(seqs)):
        mapped = _MappedFile(journal_path(directory, seqs[later]))
        try:
            pos = _find_valid_record(mapped.buf, 0, mapped.size)
        finally:
            mapped.close()
        if pos >= 0:
            return later, pos
    return None


_ZERO_CHUNK = bytes(2**20)


def _all_zero(buf: mmap.mmap | bytes, start: int, size: int) -> bool:
    """True if buf[start:size] is all zero bytes (compared a chunk at a time)."""
    with memoryview(buf) as view:
        for pos in range(start, size, len(_ZERO_CHUNK)):
            end = min(pos + len(_ZERO_CHUNK), size)
            if view[pos:end] != _ZERO_CHUNK[: end - pos]:
                return False
    return True


def _truncate(path: Path, offset: int, fsync: bool) -> None:
    os.truncate(path, offset)
    if fsync:
        fsync_path(path)


def replay_journal(
    directory: Path,
    start: JournalPosition,
    repair: bool,
    fsync: bool,
    handle: RecordHandler,
) -> ReplayOutcome:
    """Feed every valid record body at or after `start` to `handle`, in order.

    A damaged record with nothing valid after it is a torn tail (a crash mid-write; it cannot
    have been acknowledged because acks follow fdatasync): it is dropped with a WARNING and the
    file truncated there. A damaged record followed by a valid one is corruption in the middle:
    JournalCorruptionError, or with `repair` the record is skipped with an ERROR and reported
    in `skipped` so the caller can enter uncertain mode.
    """
    seqs = [s for s in list_journal_seqs(directory) if s >= start.seq]
    _check_journal_files(directory, seqs, start)
    replay = _Replay(directory, seqs, repair, fsync, handle,
                     ReplayOutcome(end=start, last_seq=max(list_journal_seqs(directory), default=-1)))
    index, pos = 0, start.offset
    while index < len(seqs):
        jump = replay.file(index, pos)
        index, pos = (index + 1, 0) if jump is None else jump
    ensure(replay.outcome.end >= start, "replay end moved before its start")
    return replay.outcome


def _check_journal_files(directory: Path, seqs: list[int], start: JournalPosition) -> None:
    """The files replay needs are there and contiguous."""
    if (not seqs or seqs[0] != start.seq) and start.offset > 0:
        raise JournalCorruptionError(
            f"journal file {journal_path(directory, start.seq)} covering the checkpoint "
            f"position offset={start.offset} is missing. Restore it, or move the data "
            f"directory aside and re-replicate this bookie.",
            journal_path(directory, start.seq),
            start.offset,
        )
    for a, b in zip(seqs, seqs[1:]):
        if b != a + 1:
            raise JournalCorruptionError(
                f"journal files are not contiguous: {journal_path(directory, a).name} is followed "
                f"by {journal_path(directory, b).name}. A journal file was removed; restore it, or "
                f"move the data directory aside and re-replicate this bookie.",
                journal_path(directory, a + 1),
                0,
            )


class _Replay:
    """One replay's state: the files, the handler, and the outcome it builds."""

    def __init__(self, directory: Path, seqs: list[int], repair: bool, fsync: bool, handle: RecordHandler,
                 outcome: ReplayOutcome) -> None:
        self.directory, self.seqs, self.repair, self.fsync = directory, seqs, repair, fsync
        self.handle, self.outcome = handle, outcome

    def file(self, index: int, pos: int) -> tuple[int, int] | None:
        """Replay file seqs[index] from pos; returns where to go on (None: the next file)."""
        path = journal_path(self.directory, self.seqs[index])
        mapped = _MappedFile(path)
        try:
            if pos > mapped.size:
                raise JournalCorruptionError(
                    f"journal file {path} is shorter ({mapped.size} bytes) than the checkpoint "
                    f"position offset={pos}: it was truncated after the checkpoint. Move the data "
                    f"directory aside and re-replicate this bookie.",
                    path,
                    pos,
                )
            while pos < mapped.size:
                body_len = _valid_record_at(mapped.buf, pos, mapped.size)
                if body_len >= 0:
                    pos = self._apply(mapped, path, index, pos, body_len)
                    continue
                if index == len(self.seqs) - 1 and _all_zero(mapped.buf, pos, mapped.size):
                    # The unused, preallocated end of the file being written at the crash. Cut it:
                    # once later files exist, zeros ending this one would read as damage.
                    log.info("journal preallocated tail cut file=%s offset=%d bytes=%d",
                             path, pos, mapped.size - pos)
                    mapped.close()
                    _truncate(path, pos, self.fsync)
                    return None
                found = _next_valid_after(self.directory, self.seqs, index, mapped, pos + 1)
                if found is None:
                    self._drop_torn_tail(mapped, path, index, pos)
                    return (len(self.seqs), 0)
                self._skip_damaged(path, pos, found)
                if found[0] != index:
                    return found
                pos = found[1]
            return None
        finally:
            mapped.close()

    def _apply(self, mapped: _MappedFile, path: Path, index: int, pos: int, body_len: int) -> int:
        body_start = pos + RECORD_HEADER_BYTES
        with memoryview(mapped.buf) as view:
            body = view[body_start : body_start + body_len]
            try:
                self.handle(body)
            except RecordFormatError as e:
                raise JournalCorruptionError(
                    f"journal record at file={path} offset={pos} has a valid checksum "
                    f"but does not decode ({e}): written by an incompatible version or "
                    f"a bug. Do not delete it; report it.",
                    path,
                    pos,
                ) from e
            finally:
                body.release()
        end = body_start + body_len
        self.outcome.records += 1
        self.outcome.end = JournalPosition(self.seqs[index], end)
        return end

    def _drop_torn_tail(self, mapped: _MappedFile, path: Path, index: int, pos: int) -> None:
        log.warning(
            "journal torn tail dropped file=%s offset=%d dropped_bytes=%d "
            "(a crash interrupted an unacknowledged write)",
            path, pos, mapped.size - pos,
        )
        self.outcome.truncated.append(f"{path}@{pos}")
        mapped.close()
        _truncate(path, pos, self.fsync)
        for later in self.seqs[index + 1 :]:
            # Nothing valid in them either (or _next_valid_after would have found it).
            _truncate(journal_path(self.directory, later), 0, self.fsync)

    def _skip_damaged(self, path: Path, pos: int, found: tuple[int, int]) -> None:
        found_path = journal_path(self.directory, self.seqs[found[0]])
        if not self.repair:
            raise JournalCorruptionError(
                f"journal corrupt in the middle: the record at file={path} offset={pos} is "
                f"damaged but a valid record follows at file={found_path} "
                f"offset={found[1]}, so acknowledged entries may be lost. Do not delete "
                f"journal files. To open anyway, restart with repair_journal=True: the "
                f"damaged record is skipped and the bookie runs in uncertain mode "
                f"(answers UNKNOWN_ENTRY_STATE instead of NO_SUCH_ENTRY/NO_SUCH_LEDGER) "
                f"until an operator re-replicates its ledgers and calls clear_uncertain().",
                path,
                pos,
            )
        log.error(
            "journal record skipped by repair file=%s offset=%d next_file=%s "
            "next_offset=%d; entering uncertain mode",
            path, pos, found_path, found[1],
        )
        self.outcome.skipped.append(f"{path}@{pos}")
