"""Misplaced ledgers: write sets that span fewer racks than the placement rule asks (issue 29).

A ledger breaks the rule when a write set of one of its fragments spans fewer than
min(W, min_racks_per_write_quorum) racks (protocol/placement.py RackRules). `ledger
placementcheck` lists them; the elected auditor's placement scan also marks the CLOSED ones it
can fix now (metadata.underreplication, reason "misplaced", naming the bookies to move off:
protocol/placement.misplaced_bookies), and the replication workers move those copies with the
same two-phase swap as a lost bookie's (rereplication.py), choosing each new home rack-aware.

Never an OPEN (or IN_RECOVERY) ledger: moving a copy of one means fencing its live writer. Its
writer's own placement already spread it as well as the racks allowed; once closed, the next
scan sees it. A fragment with a bookie that is not registered now is left to the lost-bookie
path (its rack is unknown here, and a copy moved now might be moved again).

The scan reads every ledger once, paced by the same token bucket as the lost-bookie scan, and is
not resumable: marks are idempotent, so a new auditor simply scans again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from metadata import BookieInfo, CorruptMetadataError, LedgerId, LedgerManager, LedgerMetadata
from metadata.offload_record import is_offloaded
from metadata.store import MetadataStore
from metadata.underreplication import REASON_MISPLACED, UnderReplicationManager
from pyspark_ledger.autorecovery.auditor import RateLimiter
from pyspark_ledger.protocol.placement import NO_RACK, RackRules, misplaced_bookies, rack_name, write_sets

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RackView:
    """Racks as the registry shows them now: every registered bookie's, and those with a writable bookie."""

    rack_of: Mapping[str, str]
    writable_racks: frozenset[str]

    @classmethod
    def of(cls, bookies: list[BookieInfo]) -> RackView:
        return cls({b.bookie_id: b.rack for b in bookies}, frozenset(b.rack for b in bookies if not b.read_only))

    @property
    def uses_racks(self) -> bool:
        """False when no bookie registered a rack: nothing to judge (everything is one rack)."""
        return any(r != NO_RACK for r in self.rack_of.values())


@dataclass(frozen=True, slots=True)
class Misplacement:
    ledger_id: LedgerId
    state: str
    write_quorum_size: int
    required_racks: int
    # (fragment index, racks of its narrowest write set) for every fragment breaking the rule
    fragments: tuple[tuple[int, tuple[str, ...]], ...]
    move: tuple[str, ...]  # bookies to move off to meet the rule with the racks writable now (empty: cannot yet)

    def to_json(self) -> dict[str, object]:
        return {"ledger": self.ledger_id.qualified_name, "state": self.state, "W": self.write_quorum_size,
                "requiredRacks": self.required_racks,
                "fragments": [{"index": i, "racks": [rack_name(r) for r in racks]} for i, racks in self.fragments],
                "move": list(self.move)}


def check_ledger(meta: LedgerMetadata, view: RackView, rules: RackRules) -> Misplacement | None:
    """The ledger's breaches of the rule, or None. A bookie not registered now counts as a rack
    of its own (unknown is never proof of a breach) and makes its fragment unfixable here."""
    w = meta.write_quorum_size
    required = rules.required(w)
    wanted = min(required, len(view.writable_racks))
    bad: list[tuple[int, tuple[str, ...]]] = []
    move: set[str] = set()
    for index, seg in enumerate(meta.segments):
        racks = [view.rack_of.get(b, f"?{b}") for b in seg.bookies]
        narrowest = min((tuple(sorted({racks[j] for j in ws})) for ws in write_sets(len(racks), w)), key=len)
        if len(narrowest) >= required:
            continue
        bad.append((index, narrowest))
        if all(b in view.rack_of for b in seg.bookies):
            move.update(misplaced_bookies(seg.bookies, w, view.rack_of, wanted))
    if not bad:
        return None
    return Misplacement(meta.ledger_id, meta.state.value, w, required, tuple(bad), tuple(sorted(move)))


def misplaced_ledgers(ledgers: LedgerManager, view: RackView, rules: RackRules, limiter: RateLimiter | None = None,
                      on_ledger: Callable[[], None] = lambda: None,
                      keep_going: Callable[[], bool] = lambda: True) -> Iterator[Misplacement]:
    """Every ledger breaking the rule, in id order (paced by `limiter`); stops early when
    keep_going() says so (asked before every ledger)."""
    for lid in ledgers.scan(None):
        if not keep_going():
            return
        if limiter is not None:
            limiter.acquire()
        try:
            got = ledgers.get(lid)
        except CorruptMetadataError as exc:
            log.warning("placement check skipped unreadable ledger metadata ledger=%s error=%s", lid, exc)
            continue
        on_ledger()
        if got is None or is_offloaded(got[0]):
            continue  # deleted between the listing and the read, or read from the object store
        found = check_ledger(got[0], view, rules)
        if found is not None:
            yield found


@dataclass(frozen=True, slots=True)
class PlacementScanResult:
    misplaced: int  # ledgers breaking the rule
    marked: int  # closed ones marked for their copies to move
    complete: bool  # False: stopped early (keep_going said so)


class PlacementScan:
    """The auditor's placement scan: marks every misplaced CLOSED ledger it can fix now."""

    def __init__(self, store: MetadataStore, holder: str, scan_rate_per_s: float,
                 on_ledger: Callable[[], None] = lambda: None, on_mark: Callable[[], None] = lambda: None):
        self.ledgers = LedgerManager(store)
        self.marks = UnderReplicationManager(store)
        self.holder = holder
        self.limiter = RateLimiter(scan_rate_per_s)
        self.on_ledger = on_ledger
        self.on_mark = on_mark

    def run(self, view: RackView, rules: RackRules, keep_going: Callable[[], bool]) -> PlacementScanResult:
        misplaced = marked = 0
        stopped = [False]

        def go_on() -> bool:
            stopped[0] = not keep_going()
            return not stopped[0]

        for found in misplaced_ledgers(self.ledgers, view, rules, self.limiter, self.on_ledger, go_on):
            misplaced += 1
            if found.state == "CLOSED" and found.move and self.marks.mark(found.ledger_id, found.move,
                                                                          REASON_MISPLACED, self.holder):
                marked += 1
                self.on_mark()
                log.info("marked misplaced ledger=%s move=%s", found.ledger_id, ",".join(found.move))
        if stopped[0]:
            log.info("placement scan stopped misplaced=%d marked=%d", misplaced, marked)
            return PlacementScanResult(misplaced, marked, complete=False)
        log.info("placement scan finished misplaced=%d marked=%d", misplaced, marked)
        return PlacementScanResult(misplaced, marked, complete=True)
