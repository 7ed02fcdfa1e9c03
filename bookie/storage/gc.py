"""Garbage collection of a bookie: ledgers metadata no longer has are deleted here, copies of
CLOSED ledgers whose ensembles no longer name this bookie are deleted after a grace period, the
dirty tails of CLOSED ledgers are capped, and entry logs nothing live points into are removed.

Safety: a ledger is deleted only when metadata answered, for that very ledger, that it does not
exist, after a `sync()` (bookie/gc_service.py: a ZooKeeper server that lags the leader must not
make a just-created ledger look absent, apache/bookkeeper#870). An error or an unreachable store
is "unknown", never "absent". Each ledger is looked up after the bookie's own list was taken, and
a client creates a ledger's metadata before it writes to any bookie, so a ledger created while
the scan runs is either not in the list or is found. In scope 0, whose ids the store hands out in
order, an absent ledger is deleted only if its id is at or below the highest this bookie has seen
in metadata (the id counter, the newest ledger, any ledger found): an id above it is newer than
the view of metadata the answer came from.

A scan looks at most `max_ledgers_per_scan` ledgers, resuming after the last one the previous
scan looked at (in id order, wrapping around), so every ledger is reached.

Over-replication (BOOKKEEPER-895): a replacement (autorecovery's swap, a reshape) moves a CLOSED
ledger's fragment off a bookie, which keeps its copy. Such a copy is deleted once it has been seen
over-replicated for `over_replicated_grace_s` (readers holding the metadata from before the
change may still read it meanwhile), never while a swap or reshape record in flight names this
bookie (or cannot be read), never for an OPEN or IN_RECOVERY ledger (its ensembles may change).
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from bookie.status import Status
from bookie.storage.engine_types import LedgerKey
from bookie.storage.errors import ensure

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LedgerFacts:
    """What metadata says about one ledger: exists, and once CLOSED its last entry and every
    bookie any of its fragments names (None: not CLOSED, or not known)."""

    exists: bool
    closed_last: int | None = None
    ensemble_bookies: frozenset[str] | None = None
    # Offloaded to the object store and past the log's offload_delete_after_ms
    # (docs/tiered-storage.md): the bookies' copies may go while the metadata stays.
    offloaded_copy_deletable: bool = False


# Raises on any metadata error (the ledger is then left alone); returns exists=False only when
# metadata answered, after a sync, that the ledger is not there.
LedgerLookup = Callable[[LedgerKey], LedgerFacts]
# The highest scope-0 ledger id metadata knows of, read after a sync (raises: unknown).
HighestId = Callable[[], int]
# The bookies a swap or reshape record in flight names for a ledger; None: a record could not be
# read (every bookie counts as named). Raises on a metadata error.
InFlightBookies = Callable[[LedgerKey], frozenset[str] | None]
Progress = Callable[[str, int, int], None]  # (phase, done, total)
SEQUENTIAL_SCOPE = 0  # ids handed out in order by the store (metadata/ledgers.py)


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
    max_ledgers_per_scan: int = 100_000  # bound on one scan; the next resumes after it
    # How long a CLOSED ledger's copy that no fragment names any more is kept (seen so at
    # every scan meanwhile) before it is deleted; readers with older metadata may read it.
    over_replicated_grace_s: float = 3600.0
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

    def __init__(self, storage: GcStorage, lookup: LedgerLookup, settings: GcSettings, *,
                 bookie_id: str | None = None, highest_id: HighestId | None = None,
                 in_flight: InFlightBookies | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        """bookie_id and in_flight: over-replicated copies are collected only with both.
        highest_id None: no id bound in scope 0 (a scripted lookup in a test knows no lag)."""
        if settings.max_ledgers_per_scan < 1 or settings.over_replicated_grace_s < 0:
            raise ValueError("max_ledgers_per_scan must be >= 1 and over_replicated_grace_s >= 0")
        self._storage = storage
        self._lookup = lookup
        self._settings = settings
        self._bookie_id = bookie_id
        self._highest_id = highest_id
        self._in_flight = in_flight
        self._clock = clock
        self._cursor: LedgerKey | None = None  # the last ledger the previous scan looked at
        self._highest_seen = -1  # the highest scope-0 id found in metadata so far
        self._over_since: dict[LedgerKey, float] = {}  # first seen over-replicated (clock)
        self._run_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._counters: dict[str, Any] = {
            "gc_runs": 0, "last_gc_unix_s": None, "ledgers_deleted": 0, "lookup_errors": 0,
            "dirty_tails_capped": 0, "reclaimed_bytes_total": 0, "compaction_runs_total": 0,
            "last_compaction_unix_s": None, "over_replicated_deleted": 0, "absent_kept_above_highest_id": 0,
            "offloaded_deleted": 0,
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

    def _batch(self) -> list[LedgerKey]:
        """This scan's ledgers: at most max_ledgers_per_scan, in id order from just after the
        last one the previous scan looked at, wrapping around."""
        local = sorted(self._storage.ledgers())
        live = set(local)
        for gone in [k for k in self._over_since if k not in live]:
            del self._over_since[gone]
        start = 0 if self._cursor is None else bisect.bisect_right(local, self._cursor)
        batch = (local[start:] + local[:start])[: self._settings.max_ledgers_per_scan]
        ensure(len(set(batch)) == len(batch), "a scan looks at each ledger once")
        return batch

    def _sequential_bound(self) -> int | None:
        """The highest scope-0 id an absent ledger may have to be deleted; None: no bound."""
        if self._highest_id is None:
            return None
        try:
            self._highest_seen = max(self._highest_seen, self._highest_id())
        except Exception as e:  # noqa: BLE001 - unknown: only ids already seen may go
            log.debug("gc: highest ledger id unknown error=%r", e)
        return self._highest_seen

    def _scan(self, progress: Progress | None) -> tuple[int, int, int]:
        local = self._batch()
        bound = self._sequential_bound()
        pause = 1.0 / self._settings.lookups_per_s if self._settings.lookups_per_s > 0 else 0.0
        deleted = errors = capped = 0
        for done, ledger in enumerate(local, 1):
            if self._stop.is_set():
                break
            self._cursor = ledger
            try:
                facts = self._lookup(ledger)
            except Exception as e:  # noqa: BLE001 - unknown is not absent: keep the ledger
                errors += 1
                log.debug("gc: metadata lookup failed ledger=%s error=%r", ledger, e)
                continue
            if not facts.exists:
                if ledger[0] == SEQUENTIAL_SCOPE and bound is not None and ledger[1] > bound:
                    self._counters["absent_kept_above_highest_id"] += 1
                    log.info("gc: ledger absent from metadata but newer than any id seen there; kept "
                             "ledger=%s highest_seen=%d", ledger, bound)
                elif self._storage.delete_ledger(ledger) == Status.OK:
                    deleted += 1
            else:
                if ledger[0] == SEQUENTIAL_SCOPE:
                    self._highest_seen = max(self._highest_seen, ledger[1])
                if facts.offloaded_copy_deletable and self._storage.delete_ledger(ledger) == Status.OK:
                    deleted += 1
                    self._counters["offloaded_deleted"] += 1
                    log.info("gc: copy of an offloaded ledger deleted ledger=%s", ledger)
                    continue
                if facts.closed_last is not None:
                    self._storage.set_closed_last(ledger, facts.closed_last)
                    capped += 1
                deleted += self._collect_over_replicated(ledger, facts)
            if progress is not None:
                progress("scan", done, len(local))
            if pause:
                self._stop.wait(pause)
        return deleted, errors, capped

    def _collect_over_replicated(self, ledger: LedgerKey, facts: LedgerFacts) -> int:
        """Delete this bookie's copy of a CLOSED ledger no fragment names, once it was seen so for
        the grace period and no record in flight names this bookie. Returns 1 if deleted."""
        me = self._bookie_id
        if me is None or self._in_flight is None or facts.ensemble_bookies is None or me in facts.ensemble_bookies:
            self._over_since.pop(ledger, None)  # OPEN, IN_RECOVERY, or named again: start over
            return 0
        ensure(facts.closed_last is not None, "only a CLOSED ledger's copy is ever over-replicated")
        now = self._clock()
        since = self._over_since.setdefault(ledger, now)
        if now - since < self._settings.over_replicated_grace_s:
            return 0
        try:
            named = self._in_flight(ledger)
        except Exception as e:  # noqa: BLE001 - unknown: keep the copy until a later scan
            log.debug("gc: autorecovery records unreadable ledger=%s error=%r", ledger, e)
            return 0
        if named is None or me in named:
            log.debug("gc: over-replicated copy kept: a record in flight names this bookie ledger=%s", ledger)
            return 0
        if self._storage.delete_ledger(ledger) != Status.OK:
            return 0
        del self._over_since[ledger]
        self._counters["over_replicated_deleted"] += 1
        log.info("gc: over-replicated copy deleted ledger=%s ensembles=%s seconds_seen=%.0f", ledger,
                 sorted(facts.ensemble_bookies), now - since)
        return 1

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
