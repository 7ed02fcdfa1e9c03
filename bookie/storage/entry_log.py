"""Entry log files: `<entries dir>/<id:016x>.log`, entries appended after the journal made
them durable. No fsync on append (the page cache makes them readable at once); the checkpoint
fsyncs the logs written since the previous checkpoint before it persists index locations."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path

from bookie.storage.config import LOCATION_LOG_ID_MAX
from bookie.storage.durable_files import fsync_dir, pwritev_all
from bookie.storage.errors import ensure

log = logging.getLogger(__name__)

ENTRY_LOG_SUFFIX = ".log"


def entry_log_path(directory: Path, log_id: int) -> Path:
    return directory / f"{log_id:016x}{ENTRY_LOG_SUFFIX}"


class EntryLogs:
    """All entry log files of a data dir. One writer thread appends (`append_regions`); any
    thread may `pread`. File descriptors stay open for reads until `close`."""

    def __init__(self, directory: Path, max_bytes: int, fsync: bool) -> None:
        self._directory = directory
        self._max_bytes = max_bytes
        self._fsync = fsync
        self._fds: dict[int, int] = {}
        self._unsynced: set[int] = set()
        self._unsynced_lock = threading.Lock()
        self._id_lock = threading.Lock()  # ids are taken by the writer and by compaction
        # Held by every append and roll: compaction may roll the current log from its own thread.
        self._append_lock = threading.Lock()
        self._protected: set[int] = set()  # compaction targets being written: never removed
        highest = 0
        for p in sorted(directory.glob("*" + ENTRY_LOG_SUFFIX)):
            try:
                log_id = int(p.stem, 16)
            except ValueError:
                log.warning("ignoring unexpected file in entry log dir path=%s", p)
                continue
            highest = max(highest, log_id)
            if p.stat().st_size == 0:
                # Created by a run that wrote nothing to it; nothing can point into it.
                p.unlink()
                continue
            self._fds[log_id] = os.open(p, os.O_RDONLY)
        self._current_id = 0
        self._current_fd = -1
        self._current_size = 0
        self._highest_id = highest
        self._open_new(self._allocate_id())

    def _allocate_id(self) -> int:
        with self._id_lock:
            self._highest_id += 1
            return self._highest_id

    def _open_new(self, log_id: int) -> None:
        ensure(log_id <= LOCATION_LOG_ID_MAX, f"entry log id {log_id} exceeds the location format")
        path = entry_log_path(self._directory, log_id)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        if self._fsync:
            # A checkpoint may reference this file; its name must survive a crash.
            fsync_dir(self._directory)
        self._fds[log_id] = fd
        self._current_id = log_id
        self._current_fd = fd
        self._current_size = 0
        log.info("entry log opened path=%s", path)

    @property
    def current_id(self) -> int:
        return self._current_id

    def append_regions(self, regions: Sequence[bytes | memoryview]) -> list[tuple[int, int]]:
        """Append each region (the entries of one batch, already in entry-log layout) whole
        into one log; returns (log id, file offset) per region. One pwrite per log touched."""
        with self._append_lock:
            return self._append_regions(regions)

    def _append_regions(self, regions: Sequence[bytes | memoryview]) -> list[tuple[int, int]]:
        placements: list[tuple[int, int]] = []
        pending: list[bytes | memoryview] = []
        pending_bytes = 0
        for region in regions:
            size = len(region)
            if self._current_size + pending_bytes + size > self._max_bytes and (
                self._current_size + pending_bytes > 0
            ):
                self._flush(pending, pending_bytes)
                pending, pending_bytes = [], 0
                self._roll()
            placements.append((self._current_id, self._current_size + pending_bytes))
            pending.append(region)
            pending_bytes += size
        self._flush(pending, pending_bytes)
        return placements

    def _flush(self, pending: list[bytes | memoryview], pending_bytes: int) -> None:
        if not pending_bytes:
            return
        pwritev_all(self._current_fd, pending, self._current_size)
        self._current_size += pending_bytes
        with self._unsynced_lock:
            self._unsynced.add(self._current_id)

    def roll(self) -> None:
        """Start a new log now (after a failed append: nothing is appended after its torn end).
        Skips an id a failed earlier attempt already created."""
        with self._append_lock:
            log_id = self._allocate_id()
            while entry_log_path(self._directory, log_id).exists():
                log_id = self._allocate_id()
            self._open_new(log_id)

    def roll_current(self, log_id: int) -> bool:
        """Start a new log if `log_id` is still the current one (between two appends, never
        inside one); True if it rolled. Compaction uses it so a mostly-dead current log can be
        compacted instead of waiting until appends fill it."""
        with self._append_lock:
            if self._current_id != log_id or self._current_size == 0:
                return False
            self._roll()
            return True

    def _roll(self) -> None:
        # The old fd stays open for reads; the checkpoint fsyncs it through the same fd.
        self._open_new(self._allocate_id())

    def pread(self, log_id: int, offset: int, size: int) -> bytes:
        """Raises KeyError for an unknown log id, OSError on I/O errors."""
        return os.pread(self._fds[log_id], size, offset)

    def sync(self) -> int:
        """fsync every log appended to since the last call; returns how many."""
        with self._unsynced_lock:
            todo = sorted(self._unsynced)
            self._unsynced.clear()
        try:
            for log_id in todo:
                if self._fsync:
                    os.fsync(self._fds[log_id])
        except BaseException:
            with self._unsynced_lock:
                self._unsynced.update(todo)
            raise
        return len(todo)

    def open_side_log(self) -> tuple[int, int]:
        """A new log compaction writes into (never the current one); protected from removal
        until release_side_log. Returns (log id, fd)."""
        log_id = self._allocate_id()
        fd = os.open(entry_log_path(self._directory, log_id), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        if self._fsync:
            fsync_dir(self._directory)
        self._protected.add(log_id)
        self._fds[log_id] = fd
        return log_id, fd

    def release_side_log(self, log_id: int) -> None:
        self._protected.discard(log_id)

    @property
    def protected(self) -> frozenset[int]:
        return frozenset(self._protected)

    def sizes(self) -> dict[int, int]:
        """Size in bytes of every open entry log, by log id."""
        out: dict[int, int] = {}
        for log_id, fd in list(self._fds.items()):
            try:
                out[log_id] = os.fstat(fd).st_size
            except OSError:
                continue  # removed meanwhile
        return out

    def remove(self, log_id: int) -> int:
        """Close and delete a log no index location points into any more (never the current
        one); returns the bytes freed. The caller guarantees no read is using it."""
        ensure(log_id != self._current_id and log_id not in self._protected,
               "the current entry log and compaction targets cannot be removed")
        fd = self._fds.pop(log_id, None)
        if fd is None:
            return 0
        size = os.fstat(fd).st_size
        os.close(fd)
        with self._unsynced_lock:
            self._unsynced.discard(log_id)
        entry_log_path(self._directory, log_id).unlink(missing_ok=True)
        if self._fsync:
            fsync_dir(self._directory)
        log.info("entry log removed log_id=%d bytes=%d", log_id, size)
        return size

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._current_fd = -1
