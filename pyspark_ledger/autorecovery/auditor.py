"""The orphan auditor (BP-44): finds ledgers that should not exist any more and records them.

A ledger is orphaned when
  DELETE_OVERDUE     it was closed with expect_delete_after and still exists after that instant
                     plus a grace period, or
  BROKEN_PARENT_REF  its create context names a parent (child_of_ledger) that does not exist, or
  NOT_IN_ITS_LOG     its create context says it belongs to a log (data set "log:<name>"), it was
                     created more than a grace period ago, and that log's record neither
                     references it nor lists it for deletion (or the log is gone): a writer
                     killed between creating its next ledger and adding it to the log leaves one.
                     A log record that cannot be read decides nothing (unknown is not absent).
Findings live under /orphans/<qualified name> so `ledger listorphaned` reads only that directory.
Scans are paced by a token bucket (ledgers per second), never a burst over every ledger.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Container, Iterator
from dataclasses import asdict, dataclass

from metadata import CorruptMetadataError, LedgerId, LedgerMetadata, MetadataError, NodeExistsError, NoNodeError
from metadata.context import now_ms
from metadata.log_lookup import LedgerLookup
from metadata.logs import LogManager
from metadata.paths import ORPHANS, orphan_path
from pyspark_ledger.ledger.context import LedgerContext

log = logging.getLogger(__name__)

DELETE_OVERDUE = "DELETE_OVERDUE"
BROKEN_PARENT_REF = "BROKEN_PARENT_REF"
NOT_IN_ITS_LOG = "NOT_IN_ITS_LOG"
LOG_DATA_SET_PREFIX = "log:"  # pyspark_ledger.log's create context: part_of_data_set("log:<name>")
LOG_GONE: frozenset[LedgerId] = frozenset()  # marker: the log does not exist (any more)
DEFAULT_GRACE_PERIOD_S = 3600.0
DEFAULT_SCAN_RATE_PER_S = 200.0


@dataclass(frozen=True)
class Orphan:
    ledger_id: LedgerId
    reason: str
    detail: str  # epoch seconds of the overdue deletion, or the missing parent's id
    found_ms: int

    def to_bytes(self) -> bytes:
        d = asdict(self)
        d["ledger_id"] = self.ledger_id.qualified_name
        return json.dumps(d, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Orphan:
        d = json.loads(data)
        return cls(LedgerId.from_qualified_name(d["ledger_id"]), d["reason"], d["detail"], int(d["found_ms"]))


class RateLimiter:
    """A token bucket: at most `rate` acquisitions per second, with a burst of one second's worth."""

    def __init__(self, rate_per_s: float):
        self.rate = max(rate_per_s, 0.1)
        self.tokens = self.rate
        self.last = time.monotonic()

    def acquire(self) -> None:
        while True:
            now = time.monotonic()
            self.tokens = min(self.rate, self.tokens + (now - self.last) * self.rate)
            self.last = now
            if self.tokens >= 1:
                self.tokens -= 1
                return
            time.sleep((1 - self.tokens) / self.rate)


# A log's name -> the ledger ids its record references (ledgers and pending deletions), LOG_GONE
# when the log does not exist, None when its record could not be read.
# Ledgers of one log the auditor walks per pass (from the newest back; one segment read per 256).
AUDIT_LOG_SCAN_MAX = 1_048_576
LogReferences = Callable[[str], Container[LedgerId] | None]


def orphan_reason(meta: LedgerMetadata, exists: Callable[[LedgerId], bool], now: int, grace_ms: int,
                  log_references: LogReferences | None = None) -> tuple[str, str] | None:
    """Pure decision for one ledger (exists: does a ledger id exist?; log_references: see
    LogReferences, or None to skip the log rule)."""
    close = meta.close_context
    if meta.is_closed and close is not None and close.expect_delete_after_ms is not None:
        if now > close.expect_delete_after_ms + grace_ms:
            return DELETE_OVERDUE, str(close.expect_delete_after_ms // 1000)
    create = meta.create_context
    if create is not None and create.child_of_ledger is not None and not exists(create.child_of_ledger):
        return BROKEN_PARENT_REF, str(create.child_of_ledger)
    data_set = create.data_set if create is not None else None
    if (log_references is not None and data_set is not None and data_set.startswith(LOG_DATA_SET_PREFIX)
            and now > meta.ctime_ms + grace_ms):
        name = data_set[len(LOG_DATA_SET_PREFIX):]
        refs = log_references(name)
        if refs is LOG_GONE:
            return NOT_IN_ITS_LOG, f"{data_set} (gone)"
        if refs is not None and meta.ledger_id not in refs:
            return NOT_IN_ITS_LOG, data_set
    return None


class Auditor:
    def __init__(self, context: LedgerContext, *, grace_period_s: float = DEFAULT_GRACE_PERIOD_S,
                 scan_rate_per_s: float = DEFAULT_SCAN_RATE_PER_S):
        self.ledgers = context.ledgers
        self.store = context.ledgers.store  # where the findings live, next to the ledgers
        self.logs = LogManager(self.store)  # log records live in the same store
        self.grace_ms = int(grace_period_s * 1000)
        self.limiter = RateLimiter(scan_rate_per_s)
        self._stop = threading.Event()

    def audit_once(self, progress: Callable[[int], None] | None = None) -> list[Orphan]:
        """One paced pass over every ledger; records new orphans and clears resolved ones."""
        store = self.store
        now = now_ms()
        found: dict[LedgerId, Orphan] = {}
        existing_cache: dict[LedgerId, bool] = {}

        def exists(lid: LedgerId) -> bool:
            if lid not in existing_cache:
                existing_cache[lid] = self.ledgers.get(lid) is not None
            return existing_cache[lid]

        log_references = self._log_references_once_per_pass()
        for n, lid in enumerate(self.ledgers.scan(None), 1):
            if self._stop.is_set():
                break
            self.limiter.acquire()
            try:
                got = self.ledgers.get(lid)
            except CorruptMetadataError as exc:
                log.warning("auditor skipped unreadable ledger metadata ledger=%s error=%s", lid, exc)
                continue
            if progress:
                progress(n)
            if got is None:
                continue
            existing_cache[lid] = True
            decision = orphan_reason(got[0], exists, now, self.grace_ms, log_references)
            if decision is not None:
                found[lid] = Orphan(lid, decision[0], decision[1], now)
        recorded = {o.ledger_id: o for o in self.list_orphans()}
        for lid, orphan in found.items():
            if lid not in recorded:
                try:
                    store.create(orphan_path(lid), orphan.to_bytes())
                except NodeExistsError:
                    pass
                log.warning("orphaned ledger found ledger=%s reason=%s detail=%s", lid, orphan.reason, orphan.detail)
        for lid in recorded:
            if lid not in found and not self._stop.is_set():
                try:
                    store.delete(orphan_path(lid))
                except NoNodeError:
                    pass
        return sorted(found.values(), key=lambda o: o.ledger_id)

    def _log_references_once_per_pass(self) -> LogReferences:
        """Each log's head is read at most once per pass, and its segments walked from the newest
        back only as far as the ledgers asked about need, at most AUDIT_LOG_SCAN_MAX ledgers per
        log per pass (metadata.log_lookup): a ledger beyond that counts as referenced (never
        reported on a guess). Ledgers trimmed but not deleted yet count as referenced. A log that
        cannot be read maps to None (decides nothing) for this pass."""
        cache: dict[str, Container[LedgerId] | None] = {}

        def references(name: str) -> Container[LedgerId] | None:
            if name not in cache:
                try:
                    lookup = LedgerLookup(self.logs, name, AUDIT_LOG_SCAN_MAX, include_queued=True)
                except MetadataError as exc:
                    log.warning("auditor could not read log record log=%s error=%s", name, exc)
                    cache[name] = None
                    return None
                cache[name] = lookup if lookup.exists else LOG_GONE
            return cache[name]

        return references

    def list_orphans(self) -> list[Orphan]:
        out = []
        for name in self.store.children(ORPHANS):
            got = self.store.get(f"{ORPHANS}/{name}")
            if got is not None:
                out.append(Orphan.from_bytes(got.value))
        return sorted(out, key=lambda o: o.ledger_id)

    def run(self, interval_s: float, passes_max: int | None = None) -> Iterator[list[Orphan]]:
        """Audit periodically (bounded by passes_max if given) until stop()."""
        passes = 0
        while not self._stop.is_set():
            yield self.audit_once()
            passes += 1
            if passes_max is not None and passes >= passes_max:
                return
            self._stop.wait(interval_s)

    def stop(self) -> None:
        self._stop.set()
