"""Coming back from a full disk without a restart: read-only -> writable once there is room.

A bookie turns read-only when its disk crosses the high-water mark (bookie.disk_monitor) or when
its journal fails (ENOSPC from a journal or entry-log write, or a failed fdatasync: the storage
engine's on_journal_failure). BookKeeper turns a bookie whose disks recover back to writable;
here that takes one more step when the journal failed: after a failed write or fdatasync the
failed journal file's content is unknown, so it is never written again. The storage engine
replaces it (BookieStorage.reopen_journal: a checkpoint covering every acknowledged record at
the start of a new journal file; the failed file is not replayed and is deleted), and only then
is the bookie advertised writable again.

The decision is taken when the disk monitor finds usage at or below the low-water mark: first a
probe proves the journal's directory takes a synced write (a disk that still fails keeps the
bookie read-only and the monitor tries again at its next check), then the journal is reopened.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Protocol

log = logging.getLogger(__name__)

PROBE_NAME = "writable-probe.tmp"
# Bytes the probe writes and syncs: a few journal groups' worth, small next to any low-water mark.
PROBE_BYTES = 256 * 1024


class ReopenableStorage(Protocol):
    @property
    def journal_failed(self) -> bool: ...

    def reopen_journal(self) -> bool: ...


def probe_synced_write(directory: Path, nbytes: int = PROBE_BYTES) -> OSError | None:
    """Write `nbytes` to a scratch file in `directory`, fdatasync it and remove it: None when the
    device takes it, else the error (ENOSPC, EIO...)."""
    path = directory / PROBE_NAME
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b"\0" * nbytes)
            os.fdatasync(fd)
        finally:
            os.close(fd)
        return None
    except OSError as e:
        return e
    finally:
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass  # removed next time, or by the operator: it holds nothing


class WritableAgain:
    """The read-only -> writable step of one bookie's storage."""

    def __init__(self, storage: ReopenableStorage, journal_dir: Path):
        self.storage = storage
        self.journal_dir = journal_dir
        self.reopened = 0  # journals replaced after a failure (a metric)

    def attempt(self) -> bool:
        """The disk has room again (usage at or below the low-water mark). True when the storage
        takes adds again; False keeps the bookie read-only (ask again at the next check)."""
        if not self.storage.journal_failed:
            return True
        error = probe_synced_write(self.journal_dir)
        if error is not None:
            log.warning("journal directory still refuses a synced write, staying read-only dir=%s error=%r",
                        self.journal_dir, error)
            return False
        if not self.storage.reopen_journal():
            return False
        self.reopened += 1
        return True
