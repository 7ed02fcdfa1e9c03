"""Journal replay: the scanner that feeds every valid record after a checkpoint to the engine
at open, drops a torn tail, and refuses (or with repair, skips) damage in the middle. The files
and their writer are in journal_writer.py (re-exported here: callers name the journal)."""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from crc32c import crc32c

from bookie.storage.durable_files import fsync_path
from bookie.storage.errors import JournalCorruptionError, RecordFormatError, ensure
from bookie.storage.format_version import check_record_version
from bookie.storage.journal_writer import (
    PAGE_CACHE_DROP_BYTES,
    PREALLOCATE_BYTES,
    JournalPosition,
    JournalWriter,
    delete_journal_files_before,
    journal_path,
    list_journal_seqs,
)
from bookie.storage.records import JOURNAL_MAGIC, MAGIC_BYTES, RECORD_HEADER, RECORD_HEADER_BYTES

# The writer's names are re-exported: callers name the journal.
__all__ = [
    "JournalPosition",
    "JournalWriter",
    "PAGE_CACHE_DROP_BYTES",
    "PREALLOCATE_BYTES",
    "RecordHandler",
    "ReplayOutcome",
    "delete_journal_files_before",
    "journal_path",
    "list_journal_seqs",
    "replay_journal",
]

log = logging.getLogger(__name__)


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
                check_record_version(body, f"file={path} offset={pos}")  # a newer format: refuse, naming it
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
