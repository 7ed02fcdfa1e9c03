"""Turns the bookie read-only when its disk fills up, and writable again once usage falls.

Hysteresis: read-only at or above `high` (e.g. 0.95), writable again only at or below `low`
(e.g. 0.90), so a bookie hovering at the threshold does not flap. A journal that failed (ENOSPC)
counts as a full disk (`mark_full`): the bookie turns writable again only below `low`, and only
if `apply(False)` manages it (bookie.writable_again); if not, it stays read-only and the next
check tries again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


def next_read_only(read_only: bool, usage: float, high: float, low: float) -> bool:
    """Pure decision: the read-only state after observing `usage` (a fraction of the disk)."""
    if not read_only and usage >= high:
        return True
    if read_only and usage <= low:
        return False
    return read_only


class DiskMonitor:
    def __init__(
        self,
        usage: Callable[[], tuple[int, int]],
        apply: Callable[[bool], bool | None],
        high: float,
        low: float,
        interval_s: float,
    ):
        self._usage, self._apply, self.high, self.low, self.interval_s = usage, apply, high, low, interval_s
        self.read_only = False
        self._full_reported = threading.Event()  # set from any thread, consumed by check_once
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="disk-monitor", daemon=True)

    def mark_full(self) -> None:
        """The storage met a full disk (a failed journal): read-only until usage falls to `low`.
        The caller has already applied read-only; never blocks (called from the journal thread)."""
        self._full_reported.set()

    def check_once(self) -> bool:
        if self._full_reported.is_set():
            self._full_reported.clear()
            self.read_only = True
        used, total = self._usage()
        fraction = used / total if total else 1.0
        new = next_read_only(self.read_only, fraction, self.high, self.low)
        if new != self.read_only:
            log.warning(
                "disk usage %.3f crossed a threshold (high=%.3f low=%.3f): read_only=%s", fraction, self.high, self.low, new
            )
            applied = self._apply(new)
            # apply may keep the bookie read-only (the journal could not be reopened yet).
            self.read_only = new if applied is None else applied
        return self.read_only

    def start(self) -> None:
        self.check_once()
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.check_once()
            except Exception:  # keep monitoring
                log.exception("disk usage check failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
