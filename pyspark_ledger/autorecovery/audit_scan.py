"""The auditor's scan: every ledger's metadata, paced, marking the ones with a fragment on a lost
bookie (metadata.underreplication). Incremental and resumable: every CURSOR_EVERY_LEDGERS ledgers
the position is written to /autorecovery/scan, so an auditor elected after its predecessor died
mid-scan goes on from there instead of from the start (marks are idempotent: a ledger marked
twice is marked once).

A resumed scan marks the rest sooner, but it never counts as an audit of its bookies (choose_scan,
audited_by): between the predecessor's last look and the successor's first, a lost bookie may have
come back, been placed in a ledger the cursor had passed (a writer's ensemble change, a worker's
replacement), and gone again, with no listing seeing it up; a successor that trusted the cursor
would never mark that ledger (the cursor's form of simulator seed 6889, see
bookie_states.forget_audits). So the successor scans those bookies again from the start once the
resumed scan ends: the cursor orders the work, it never shortens it. The simulator runs the same
two functions (testing/sim/auditor.py).

Cost per scanned ledger: one get, plus two requests (get, create or compare-and-set) when it is
marked, plus 2/CURSOR_EVERY_LEDGERS for the cursor, plus one children listing per 65,536
ledgers. With E=3 of 5 bookies, 60% of the ledgers are on a lost bookie: about 2.2 requests per
ledger. The scan rate (ledgers per second, a token bucket) therefore bounds the ZooKeeper request
rate at about 2.2x that figure: 500 ledgers/s (the default) is at most ~1,100 requests/s, and
100,000 ledgers take 200 s (docs/autorecovery.md, "Request rate").
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from metadata import CorruptMetadataError, LedgerId, LedgerManager
from metadata.errors import BadVersionError, NodeExistsError, NoNodeError
from metadata.offload_record import is_offloaded
from metadata.paths import AUDITOR_SCAN
from metadata.store import MetadataStore
from metadata.underreplication import REASON_LOST, UnderReplicationManager
from pyspark_ledger.autorecovery.auditor import RateLimiter
from pyspark_ledger.protocol.invariants import ensure

log = logging.getLogger(__name__)

CURSOR_EVERY_LEDGERS = 100


@dataclass(frozen=True, slots=True)
class ScanCursor:
    bookies: tuple[str, ...]  # the lost bookies this scan marks fragments of
    after: LedgerId | None  # every ledger up to this one is done

    def to_bytes(self) -> bytes:
        return json.dumps({"bookies": list(self.bookies),
                           "after": None if self.after is None else self.after.qualified_name}).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> ScanCursor | None:
        try:
            d = json.loads(data)
            after = None if d.get("after") is None else LedgerId.from_qualified_name(d["after"])
            return cls(tuple(sorted(d["bookies"])), after)
        except (ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True, slots=True)
class ScanChoice:
    cursor: ScanCursor
    resumed: bool  # a predecessor's cursor, resumed: not an audit of its bookies (audited_by)


def choose_scan(left_over: ScanCursor | None, lost_now: AbstractSet[str], audited: AbstractSet[str]) -> ScanChoice | None:
    """The scan to run now: a predecessor's unfinished one for its bookies still lost, else one
    from the start for the lost bookies no scan of this leader covered; None: nothing to scan."""
    if left_over is not None and set(left_over.bookies) & lost_now:
        return ScanChoice(ScanCursor(tuple(sorted(set(left_over.bookies) & lost_now)), left_over.after), True)
    todo = tuple(sorted(b for b in lost_now if b not in audited))
    return ScanChoice(ScanCursor(todo, None), False) if todo else None


def audited_by(choice: ScanChoice) -> tuple[str, ...]:
    """The bookies a finished scan counts as audited: those of a scan from the start only."""
    ensure(choice.resumed or choice.cursor.after is None, "a scan of this leader starts from the first ledger")
    return () if choice.resumed else choice.cursor.bookies


def read_cursor(store: MetadataStore) -> ScanCursor | None:
    got = store.get(AUDITOR_SCAN)
    return None if got is None else ScanCursor.from_bytes(got.value)


def write_cursor(store: MetadataStore, cursor: ScanCursor | None) -> None:
    got = store.get(AUDITOR_SCAN)
    try:
        if cursor is None:
            if got is not None:
                store.delete(AUDITOR_SCAN, got.version)
        elif got is None:
            store.create(AUDITOR_SCAN, cursor.to_bytes())
        else:
            store.compare_and_set(AUDITOR_SCAN, cursor.to_bytes(), got.version)
    except (BadVersionError, NodeExistsError, NoNodeError):
        log.warning("the scan cursor changed under the auditor (another auditor?); it is rewritten next time")


class AuditScan:
    """One auditor's scanner. `store` should count its requests (CountingStore)."""

    def __init__(self, store: MetadataStore, holder: str, scan_rate_per_s: float,
                 on_ledger: Callable[[], None] = lambda: None, on_mark: Callable[[], None] = lambda: None):
        self.store = store
        self.ledgers = LedgerManager(store)
        self.marks = UnderReplicationManager(store)
        self.holder = holder
        self.limiter = RateLimiter(scan_rate_per_s)
        self.on_ledger = on_ledger
        self.on_mark = on_mark

    def run(self, cursor: ScanCursor, keep_going: Callable[[], bool]) -> bool:
        """Scan every ledger after cursor.after, marking fragments of cursor.bookies. Returns True
        when the scan reached the end (the cursor is then removed), False when keep_going() said
        stop (checked before every ledger; the cursor stays for the next auditor)."""
        lost = frozenset(cursor.bookies)
        write_cursor(self.store, cursor)
        done, last = 0, cursor.after
        for lid in self.ledgers.scan(None):
            if cursor.after is not None and lid <= cursor.after:
                continue  # done before (the listing costs one request per 65,536 ledgers)
            if not keep_going():
                write_cursor(self.store, ScanCursor(cursor.bookies, last))
                return False
            self.limiter.acquire()
            self._audit(lid, lost)
            done, last = done + 1, lid
            if done % CURSOR_EVERY_LEDGERS == 0:
                write_cursor(self.store, ScanCursor(cursor.bookies, last))
        write_cursor(self.store, None)
        log.info("audit scan finished lost=%s ledgers=%d", ",".join(cursor.bookies), done)
        return True

    def _audit(self, lid: LedgerId, lost: frozenset[str]) -> None:
        try:
            got = self.ledgers.get(lid)
        except CorruptMetadataError as exc:
            log.warning("audit skipped unreadable ledger metadata ledger=%s error=%s", lid, exc)
            return
        self.on_ledger()
        if got is None:
            return  # deleted between the listing and the read
        if is_offloaded(got[0]):
            return  # read from the object store (docs/tiered-storage.md): its bookies' copies may be gone
        hit = got[0].bookies() & lost
        if hit and self.marks.mark(lid, hit, REASON_LOST, self.holder):
            self.on_mark()
            log.info("marked under-replicated ledger=%s lost=%s", lid, ",".join(sorted(hit)))
