"""The storage engine's modes: read-only (the disk monitor's verdict), failed (the journal
failed: read-only until it is reopened or the bookie restarts) and uncertain (a repaired journal
may have lost records: never answer "no such entry"; persisted as the UNCERTAIN marker until
an operator clears it)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bookie.storage.durable_files import TMP_SUFFIX, atomic_write, fsync_dir

log = logging.getLogger(__name__)

UNCERTAIN_MARKER_NAME = "UNCERTAIN"


class EngineModes:
    """The flags are plain attributes read without a lock on the hot paths (a bool read is
    atomic); changes and the failure listeners are ordered by a lock of their own."""

    def __init__(self, data_dir: Path) -> None:
        self._data_dir = data_dir
        (data_dir / (UNCERTAIN_MARKER_NAME + TMP_SUFFIX)).unlink(missing_ok=True)  # a torn marker write
        self.uncertain = (data_dir / UNCERTAIN_MARKER_NAME).exists()
        if self.uncertain:
            log.error("opening in uncertain mode data_dir=%s (marker %s present; clear it with "
                      "clear_uncertain() once this bookie's ledgers are re-replicated)",
                      data_dir, UNCERTAIN_MARKER_NAME)
        self.disk_read_only = False
        self.failed = False
        self._failure: BaseException | None = None
        self._failure_listeners: list[Callable[[BaseException], None]] = []
        self._lock = threading.Lock()

    @property
    def read_only(self) -> bool:
        """Refusing adds: the disk is full or the journal failed."""
        return self.disk_read_only or self.failed

    def set_disk_read_only(self, read_only: bool) -> None:
        """The disk monitor's verdict. It never makes a bookie whose journal failed writable."""
        if read_only != self.disk_read_only:
            # Turning read-only (a full disk) needs the operator; turning writable again does not.
            log.log(logging.WARNING if read_only else logging.INFO, "storage read_only=%s data_dir=%s",
                    read_only, self._data_dir)
        self.disk_read_only = read_only

    # ---- uncertain ----------------------------------------------------------------------

    def enter_uncertain(self, reason: str) -> None:
        atomic_write(self._data_dir / UNCERTAIN_MARKER_NAME,
                     f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')} {reason}\n".encode(), fsync=True)
        self.uncertain = True
        log.error("entering uncertain mode data_dir=%s reason=%s", self._data_dir, reason)

    def clear_uncertain(self) -> None:
        """Operator action, once this bookie's ledgers are known complete (re-replicated)."""
        (self._data_dir / UNCERTAIN_MARKER_NAME).unlink(missing_ok=True)
        fsync_dir(self._data_dir)
        with self._lock:
            was, self.uncertain = self.uncertain, False
        if was:
            log.info("uncertain mode cleared by operator data_dir=%s", self._data_dir)

    # ---- journal failure ----------------------------------------------------------------

    def journal_failed(self, error: BaseException) -> None:
        """The group committer's failure callback: read-only, and tell the listeners once."""
        with self._lock:
            first = not self.failed
            self.failed = True
            self._failure = self._failure or error
            listeners = list(self._failure_listeners) if first else []
        if first:
            log.error("journal failed: read-only (adds refused, reads served) until reopened data_dir=%s "
                      "error=%r", self._data_dir, error)
        for callback in listeners:
            try:
                callback(error)
            except Exception:  # one listener must not keep the others from hearing it
                log.exception("journal failure listener raised")

    def on_journal_failure(self, callback: Callable[[BaseException], None]) -> None:
        """Call `callback(error)` when the journal fails (at once if it has already failed)."""
        with self._lock:
            failure = self._failure
            if failure is None:
                self._failure_listeners.append(callback)
        if failure is not None:
            callback(failure)

    def journal_reopened(self) -> None:
        with self._lock:
            self.failed, self._failure = False, None
