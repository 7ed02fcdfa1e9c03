"""Garbage collection of a bookie: ledgers metadata no longer has are deleted here, the
dirty tails of CLOSED ledgers are capped, and entry logs nothing live points into are removed.

Safety: a ledger is deleted only when metadata answered, for that very ledger, that it does not
exist. An error or an unreachable store is "unknown", never "absent". Each ledger is looked up
after the bookie's own list was taken, and a client creates a ledger's metadata before it writes
to any bookie, so a ledger created while the scan runs is either not in the list or is found.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from bookie.status import Status
from bookie.storage.engine_types import LedgerKey

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LedgerFacts:
    """What metadata says about one ledger: exists, and its last entry once CLOSED."""

    exists: bool
    closed_last: int | None = None


# Raises on any metadata error (the ledger is then left alone); returns exists=False only when
# metadata answered that the ledger is not there.
LedgerLookup = Callable[[LedgerKey], LedgerFacts]
Progress = Callable[[str, int, int], None]  # (phase, done, total)


class GcStorage(Protocol):
    def ledgers(self) -> list[LedgerKey]: ...
    def delete_ledger(self, ledger: LedgerKey) -> Status: ...
    def set_closed_last(self, ledger: LedgerKey, last_entry: int) -> None: ...
    def reclaim_entry_logs(self) -> int: ...
    def entry_log_usage(self) -> dict[int, tuple[int, int]]: ...
    def disk_usage(self) -> tuple[int, int]: ...
    def compact_entry_logs(self, threshold: float, rate_bytes_s: float) -> tuple[int, int]: ...
    def attach_gc(self, collector: Any) -> None: ...


@dataclass
class GcSettings:
    interval_s: float = 300.0
    max_ledgers_per_scan: int = 100_000  # bound on one scan; the rest waits for the next
    lookups_per_s: float = 1000.0  # rate limit on metadata reads
    minor_compaction_threshold: float = 0.2  # logs under 20% live, every minor interval
    major_compaction_threshold: float = 0.8  # logs under 80% live, every major interval and run_now
    # Checked at each GC round (so effectively rounded up to interval_s); 0 = at every round.
    # A threshold of 0 turns that kind off.
    minor_compaction_interval_s: float = 0.0
    major_compaction_interval_s: float = 3600.0
    compaction_rate_bytes_s: float = 50.0 * 2**20


def compaction_due(st: GcSettings, since_major_s: float, since_minor_s: float) -> str | None:
    """Which compaction a GC round runs: "major", "minor" or None. Half a round of slack, so an
    interval equal to the round's (or 0) is due at every round."""
    slack = 0.5 * st.interval_s
    if since_major_s >= st.major_compaction_interval_s - slack:
        return "major"
    if since_minor_s >= st.minor_compaction_interval_s - slack:
        return "minor"
    return None


class GarbageCollector:
    """Runs GC rounds, on its own thread every interval_s or on demand (run_now)."""

    def __init__(self, storage: GcStorage, lookup: LedgerLookup, settings: GcSettings) -> None:
        self._storage = storage
        self._lookup = lookup
        self._settings = settings
        self._run_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._counters: dict[str, Any] = {
            "gc_runs": 0, "last_gc_unix_s": None, "ledgers_deleted": 0, "lookup_errors": 0,
            "dirty_tails_capped": 0, "reclaimed_bytes_total": 0, "compaction_runs_total": 0,
            "last_compaction_unix_s": None,
        }

    def start(self) -> None:
        if self._settings.interval_s > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="bookie-gc", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10.0)

    def _loop(self) -> None:
        st = self._settings
        last_major = last_minor = time.monotonic()
        while not self._stop.wait(st.interval_s):
            try:
                now = time.monotonic()
                kind = compaction_due(st, now - last_major, now - last_minor)
                if kind == "major":
                    last_major = last_minor = now  # a major compaction covers the minor one
                elif kind == "minor":
                    last_minor = now
                self.run_now(major=kind == "major", compact=kind is not None)
            except Exception:  # a failed round is retried at the next interval
                log.exception("gc round failed; will retry")

    def run_now(self, progress: Progress | None = None, major: bool = True,
                compact: bool = True) -> dict[str, Any]:
        """One GC round now (the operator's `triggergc`): the scan, removal of dead entry logs,
        then (with `compact`) a compaction, major by default; returns stats() plus this
        round's reclaimed_bytes."""
        with self._run_lock:
            started = time.monotonic()
            deleted, errors, capped = self._scan(progress)
            freed = self._storage.reclaim_entry_logs()
            if progress is not None:
                progress("reclaim", 1, 1)
            if compact:
                freed += self._compact(major)
            if progress is not None:
                progress("compaction", 1, 1)
            c = self._counters
            c["gc_runs"] += 1
            c["last_gc_unix_s"] = time.time()
            c["ledgers_deleted"] += deleted
            c["lookup_errors"] += errors
            c["dirty_tails_capped"] += capped
            c["reclaimed_bytes_total"] += freed
            log.info("gc round done ledgers_deleted=%d lookup_errors=%d dirty_tails=%d "
                     "freed_bytes=%d seconds=%.3f", deleted, errors, capped, freed,
                     time.monotonic() - started)
        return {**self.stats(), "reclaimed_bytes": freed}

    def _scan(self, progress: Progress | None) -> tuple[int, int, int]:
        local = self._storage.ledgers()[: self._settings.max_ledgers_per_scan]
        pause = 1.0 / self._settings.lookups_per_s if self._settings.lookups_per_s > 0 else 0.0
        deleted = errors = capped = 0
        for done, ledger in enumerate(local, 1):
            if self._stop.is_set():
                break
            try:
                facts = self._lookup(ledger)
            except Exception as e:  # noqa: BLE001 - unknown is not absent: keep the ledger
                errors += 1
                log.debug("gc: metadata lookup failed ledger=%s error=%r", ledger, e)
                continue
            if not facts.exists:
                if self._storage.delete_ledger(ledger) == Status.OK:
                    deleted += 1
            elif facts.closed_last is not None:
                self._storage.set_closed_last(ledger, facts.closed_last)
                capped += 1
            if progress is not None:
                progress("scan", done, len(local))
            if pause:
                self._stop.wait(pause)
        return deleted, errors, capped

    def _compact(self, major: bool) -> int:
        st = self._settings
        threshold = st.major_compaction_threshold if major else st.minor_compaction_threshold
        if threshold <= 0:
            return 0
        logs, freed = self._storage.compact_entry_logs(threshold, st.compaction_rate_bytes_s)
        if logs:
            self._counters["compaction_runs_total"] += 1
            self._counters["last_compaction_unix_s"] = time.time()
        return freed

    def stats(self) -> dict[str, Any]:
        usage = self._storage.entry_log_usage()
        used, capacity = self._storage.disk_usage()
        live = sum(v[1] for v in usage.values())
        size = sum(v[0] for v in usage.values())
        return {**self._counters, "disk_used_bytes": used, "disk_capacity_bytes": capacity,
                "live_bytes": live, "dead_bytes": max(size - live, 0),
                "entry_log_count": len(usage)}
