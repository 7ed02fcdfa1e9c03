"""Entry log files: `<ledger dir>/entries/<id:016x>.log`, entries appended after the journal
made them durable. No fsync on append (the page cache makes them readable at once); the
checkpoint fsyncs the logs written since the previous checkpoint before it persists index
locations.

Several ledger directories (BookKeeper's ledgerDirectories): log ids are unique across all of
them (index locations pack the log id, not the directory), and each new log goes to the next
directory that is not full, round robin. A directory is full when the disk monitor says so, or
when an append meets ENOSPC there: the append is then redone whole in a new log in another
directory (the torn bytes left behind are dead, nothing points at them). A directory that cannot
be listed at open is left out; the logs it held are missing, which the engine reports as lost.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from bookie.storage.config import LOCATION_LOG_ID_MAX
from bookie.storage.durable_files import fsync_dir, pwritev_all
from bookie.storage.errors import StorageError, ensure
from bookie.storage.page_cache import CacheWindow

log = logging.getLogger(__name__)

ENTRY_LOG_SUFFIX = ".log"


def entry_log_path(directory: Path, log_id: int) -> Path:
    return directory / f"{log_id:016x}{ENTRY_LOG_SUFFIX}"


class EntryLogs:
    """All entry log files of the ledger directories. One writer thread appends
    (`append_regions`); any thread may `pread`. File descriptors stay open for reads until
    `close`."""

    def __init__(self, directories: Sequence[Path], max_bytes: int, fsync: bool, id_floor: int = 0,
                 cache_window_bytes: int = 0) -> None:
        """`directories`: where the logs go (each a ledger directory's entries/). New ids start
        above `id_floor` too: the highest id the index points into, so that a log lost with its
        directory never has its id reused (its entries must stay missing, not become others).
        `cache_window_bytes`: the current log's bytes kept in the page cache behind its end (0: all)."""
        ensure(len(directories) > 0 and len(set(directories)) == len(directories),
               "entry log directories must be given, each once")
        self._dirs = list(directories)
        self._max_bytes = max_bytes
        self._cache_window_bytes = cache_window_bytes
        self._fsync = fsync
        self._fds: dict[int, int] = {}
        self._paths: dict[int, Path] = {}
        self._full: set[Path] = set()  # take no new log (the disk monitor, or ENOSPC)
        self._failed: set[Path] = set()  # could not be listed at open: left out
        self._unsynced: set[int] = set()
        self._unsynced_lock = threading.Lock()
        self._id_lock = threading.Lock()  # ids are taken by the writer and by compaction
        # Held by every append and roll: compaction may roll the current log from its own thread.
        self._append_lock = threading.Lock()
        self._protected: set[int] = set()  # compaction targets being written: never removed
        self.on_full: Callable[[Path], None] | None = None  # told when ENOSPC marks a directory full
        highest = id_floor
        for directory in self._dirs:
            highest = max(highest, self._open_existing(directory))
        if len(self._failed) == len(self._dirs):
            raise StorageError(f"no usable ledger directory among {', '.join(map(str, self._dirs))}")
        self._current_id = 0
        self._current_fd = -1
        self._current_size = 0
        self._current_cache: CacheWindow | None = None  # the current log's pages kept cached
        self._current_dir = self._dirs[-1]  # so that the first log goes to the first directory
        self._highest_id = highest
        self._open_new(self._allocate_id())

    def _open_existing(self, directory: Path) -> int:
        """Open the logs of one directory for reads; the highest id seen (0 if none)."""
        try:
            directory.mkdir(parents=True, exist_ok=True)
            paths = sorted(directory.glob("*" + ENTRY_LOG_SUFFIX))
        except OSError as e:
            log.error("ledger directory unusable, left out: its entry logs are missing dir=%s error=%r",
                      directory, e)
            self._failed.add(directory)
            return 0
        highest = 0
        for p in paths:
            try:
                log_id = int(p.stem, 16)
            except ValueError:
                log.warning("ignoring unexpected file in entry log dir path=%s", p)
                continue
            if log_id in self._paths:
                raise StorageError(f"entry log id {log_id} is in two ledger directories: {self._paths[log_id]} "
                                   f"and {p}; was a directory copied into another?")
            highest = max(highest, log_id)
            if p.stat().st_size == 0:
                # Created by a run that wrote nothing to it; nothing can point into it.
                p.unlink()
                continue
            self._fds[log_id] = os.open(p, os.O_RDONLY)
            self._paths[log_id] = p
        return highest

    def _allocate_id(self) -> int:
        with self._id_lock:
            self._highest_id += 1
            return self._highest_id

    def _pick_dir(self) -> Path:
        """The next directory after the current one that takes new logs, round robin; when every
        one is full, the current one (the bookie is read-only then, but recovery writes go on)."""
        usable = [d for d in self._dirs if d not in self._failed]
        start = usable.index(self._current_dir) + 1 if self._current_dir in usable else 0
        for i in range(len(usable)):
            candidate = usable[(start + i) % len(usable)]
            if candidate not in self._full:
                return candidate
        return self._current_dir if self._current_dir in usable else usable[0]

    def _create(self, log_id: int, directory: Path) -> int:
        ensure(log_id <= LOCATION_LOG_ID_MAX, f"entry log id {log_id} exceeds the location format")
        path = entry_log_path(directory, log_id)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        if self._fsync:
            # A checkpoint may reference this file; its name must survive a crash.
            fsync_dir(directory)
        self._fds[log_id] = fd
        self._paths[log_id] = path
        return fd

    def _open_new(self, log_id: int) -> None:
        directory = self._pick_dir()
        fd = self._create(log_id, directory)
        self._current_id = log_id
        self._current_fd = fd
        self._current_size = 0
        self._current_cache = CacheWindow(fd, self._cache_window_bytes) if self._cache_window_bytes else None
        self._current_dir = directory
        log.info("entry log opened path=%s", entry_log_path(directory, log_id))

    # ---- directories --------------------------------------------------------------------

    @property
    def directories(self) -> list[Path]:
        return list(self._dirs)

    @property
    def failed_directories(self) -> frozenset[Path]:
        return frozenset(self._failed)

    def set_full(self, directory: Path, full: bool) -> None:
        """The disk monitor's verdict on one directory. A full directory takes no new log, and
        the current log moves off it at once when another directory has room."""
        ensure(directory in self._dirs, f"{directory} is not an entry log directory")
        with self._append_lock:
            if full == (directory in self._full):
                return
            (self._full.add if full else self._full.discard)(directory)
            log.log(logging.WARNING if full else logging.INFO, "ledger directory full=%s dir=%s", full, directory)
            if full and directory == self._current_dir and self._pick_dir() != directory:
                self._roll()

    def all_full(self) -> bool:
        return all(d in self._full or d in self._failed for d in self._dirs)

    def existing_ids(self) -> frozenset[int]:
        return frozenset(self._fds)

    @property
    def current_id(self) -> int:
        return self._current_id

    def append_regions(self, regions: Sequence[Sequence[bytes | memoryview]]) -> list[tuple[int, int]]:
        """Append each region (the entries of one batch, already in entry-log layout, as parts
        laid end to end) whole into one log; returns (log id, file offset) per region. One
        pwritev per log touched.
        ENOSPC marks the directory full and redoes the whole append in another one."""
        with self._append_lock:
            for _ in range(len(self._dirs)):
                try:
                    return self._append_regions(regions)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    self._full.add(self._current_dir)
                    if self.on_full is not None:
                        self.on_full(self._current_dir)  # must not block: we hold the append lock
                    if self._pick_dir() == self._current_dir:
                        raise  # every directory is full
                    log.warning("ledger directory full (ENOSPC), appending to another dir=%s", self._current_dir)
                    self._roll()
            return self._append_regions(regions)

    def _append_regions(self, regions: Sequence[Sequence[bytes | memoryview]]) -> list[tuple[int, int]]:
        placements: list[tuple[int, int]] = []
        pending: list[bytes | memoryview] = []
        pending_bytes = 0
        for region in regions:
            size = sum(map(len, region))
            if self._current_size + pending_bytes + size > self._max_bytes and (
                self._current_size + pending_bytes > 0
            ):
                self._flush(pending, pending_bytes)
                pending, pending_bytes = [], 0
                self._roll()
            placements.append((self._current_id, self._current_size + pending_bytes))
            pending += region
            pending_bytes += size
        self._flush(pending, pending_bytes)
        return placements

    def _flush(self, pending: list[bytes | memoryview], pending_bytes: int) -> None:
        if not pending_bytes:
            return
        pwritev_all(self._current_fd, pending, self._current_size)
        self._current_size += pending_bytes
        if self._current_cache is not None:
            self._current_cache.appended(self._current_size)
        with self._unsynced_lock:
            self._unsynced.add(self._current_id)

    def roll(self) -> None:
        """Start a new log now (after a failed append: nothing is appended after its torn end).
        Skips an id a failed earlier attempt already created."""
        with self._append_lock:
            log_id = self._allocate_id()
            while any(entry_log_path(d, log_id).exists() for d in self._dirs if d not in self._failed):
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

    def _roomiest_dir(self) -> tuple[Path, int]:
        """The directory (not full) with the most free bytes, and those bytes."""
        usable = [d for d in self._dirs if d not in self._failed and d not in self._full] or [self._current_dir]
        free = {d: shutil.disk_usage(d).free for d in usable}
        best = max(usable, key=lambda d: free[d])
        return best, free[best]

    def side_log_free_bytes(self) -> int:
        """Free bytes where open_side_log would write (compaction checks it first)."""
        return self._roomiest_dir()[1]

    def open_side_log(self) -> tuple[int, int]:
        """A new log compaction writes into (never the current one), in the roomiest directory;
        protected from removal until release_side_log. Returns (log id, fd)."""
        log_id = self._allocate_id()
        fd = self._create(log_id, self._roomiest_dir()[0])
        self._protected.add(log_id)
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
        path = self._paths.pop(log_id, None)
        if fd is None or path is None:
            return 0
        size = os.fstat(fd).st_size
        os.close(fd)
        with self._unsynced_lock:
            self._unsynced.discard(log_id)
        path.unlink(missing_ok=True)
        if self._fsync:
            fsync_dir(path.parent)
        log.info("entry log removed log_id=%d bytes=%d", log_id, size)
        return size

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._current_fd = -1
