"""The scrubber: every stored entry of this bookie is read back and verified at a bounded byte
rate, so silent disk corruption is found while the other copies still exist (TigerBeetle scrubs
its grid the same way), and each damaged copy is handed to peer repair (bookie/peer_repair.py).

One pass visits every ledger's stored entries in windows (storage.scrub_window); between windows
it sleeps enough to stay under `rate_bytes_s`. A pass starts every `interval_s` (counted from the
end of the previous one); `run_now` runs one at once (tests, the operator). Nothing here changes
stored data: a repair is an ordinary recovery add of a peer's good copy.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from bookie.storage.engine_scrub import ScrubWindow
from bookie.storage.engine_types import LedgerKey

log = logging.getLogger(__name__)

# Bytes verified per window: bounds one read and one sleep of the throttle.
SCRUB_WINDOW_BYTES = 4 * 2**20
# A pass never sleeps longer than this at once (stop() stays prompt).
THROTTLE_SLEEP_S_MAX = 1.0

# (ledger, damaged entry ids) -> how many of them were repaired.
Repair = Callable[[LedgerKey, list[int]], int]


class ScrubStorage(Protocol):
    def scrub_ledgers(self) -> list[LedgerKey]: ...
    def scrub_window(self, ledger: LedgerKey, first: int, max_bytes: int) -> ScrubWindow: ...


@dataclass(frozen=True)
class ScrubSettings:
    interval_s: float = 86_400.0  # one pass a day; 0 = no periodic scrubbing
    rate_bytes_s: float = 20.0 * 2**20


class Scrubber:
    def __init__(self, storage: ScrubStorage, repair: Repair, settings: ScrubSettings) -> None:
        self._storage = storage
        self._repair = repair
        self._settings = settings
        self._stop = threading.Event()
        self._run_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._counters: dict[str, Any] = {
            "scrub_passes_total": 0, "scrubbed_bytes_total": 0, "scrubbed_entries_total": 0,
            "scrub_damaged_total": 0, "scrub_repaired_total": 0, "last_scrub_unix_s": None,
            "last_scrub_damaged": 0, "last_scrub_repaired": 0,
        }

    def start(self) -> None:
        if self._settings.interval_s > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="bookie-scrub", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(THROTTLE_SLEEP_S_MAX + 5.0)

    def _loop(self) -> None:
        while not self._stop.wait(self._settings.interval_s):
            try:
                self.run_now()
            except Exception:  # a failed pass is retried at the next interval
                log.exception("scrub pass failed; will retry")

    def run_now(self) -> dict[str, Any]:
        """One whole pass now; returns stats() plus this pass's damaged/repaired counts."""
        with self._run_lock:
            started = time.monotonic()
            damaged = repaired = scanned = entries = 0
            for ledger in self._storage.scrub_ledgers():
                if self._stop.is_set():
                    break
                d, r, b, n = self._scrub_ledger(ledger, started, scanned)
                damaged, repaired, scanned, entries = damaged + d, repaired + r, scanned + b, entries + n
            c = self._counters
            c["scrub_passes_total"] += 1
            c["scrubbed_bytes_total"] += scanned
            c["scrubbed_entries_total"] += entries
            c["scrub_damaged_total"] += damaged
            c["scrub_repaired_total"] += repaired
            c["last_scrub_unix_s"] = time.time()
            c["last_scrub_damaged"], c["last_scrub_repaired"] = damaged, repaired
            level = logging.WARNING if damaged > repaired else logging.INFO
            log.log(level, "scrub pass done entries=%d bytes=%d damaged=%d repaired=%d seconds=%.1f",
                    entries, scanned, damaged, repaired, time.monotonic() - started)
        return {**self.stats(), "damaged": damaged, "repaired": repaired}

    def _scrub_ledger(self, ledger: LedgerKey, started: float, scanned_before: int) -> tuple[int, int, int, int]:
        damaged = repaired = scanned = entries = 0
        first: int | None = 0
        while first is not None and not self._stop.is_set():
            window = self._storage.scrub_window(ledger, first, SCRUB_WINDOW_BYTES)
            scanned += window.bytes_read
            entries += window.entries_checked
            if window.damaged:
                damaged += len(window.damaged)
                log.warning("scrub found damaged copies ledger=%s entries=%s", ledger, window.damaged[:20])
                try:
                    repaired += self._repair(ledger, window.damaged)
                except Exception:  # unrepaired now; the next pass finds them again
                    log.exception("peer repair failed ledger=%s", ledger)
            first = window.next_first
            self._throttle(started, scanned_before + scanned)
        return damaged, repaired, scanned, entries

    def _throttle(self, started: float, scanned: int) -> None:
        rate = self._settings.rate_bytes_s
        if rate <= 0:
            return
        ahead = scanned / rate - (time.monotonic() - started)
        while ahead > 0 and not self._stop.wait(min(ahead, THROTTLE_SLEEP_S_MAX)):
            ahead = scanned / rate - (time.monotonic() - started)

    def stats(self) -> dict[str, Any]:
        return dict(self._counters)
