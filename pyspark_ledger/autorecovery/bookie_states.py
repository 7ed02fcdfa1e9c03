"""Which bookies are up, read-only or down, since when, and which count as lost. Pure: the
auditor feeds it what metadata shows (registrations, cookies) and the time.

A bookie is DOWN when it has a cookie (it registered once: the cookie is written at its first
start) and no registration. It is LOST once it has been down for the grace period, so that a
restart (a few seconds without a registration) is not a loss. READ_ONLY comes from its
registration: it still serves reads, so its copies count and nothing is re-replicated.

The auditor keeps these in /autorecovery/bookies/<id> (JSON), so `ledger listbookies` can show
since-when, and a newly elected auditor keeps the down-since of its predecessor (a bookie does
not get a second grace period because the auditor changed).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace

UP = "up"
READ_ONLY = "read-only"
DOWN = "down"


@dataclass(frozen=True, slots=True)
class BookieState:
    bookie_id: str
    state: str  # UP, READ_ONLY or DOWN
    since_ms: int
    # While DOWN: the down-since of the loss an audit scan has marked every fragment of (so a new
    # auditor does not scan again for it); 0 when no scan finished for this loss.
    audited_since_ms: int = 0

    def to_bytes(self) -> bytes:
        return json.dumps({"bookieId": self.bookie_id, "state": self.state, "sinceMs": self.since_ms,
                           "auditedSinceMs": self.audited_since_ms}, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> BookieState | None:
        try:
            d = json.loads(data)
            return cls(str(d["bookieId"]), str(d["state"]), int(d["sinceMs"]), int(d.get("auditedSinceMs", 0)))
        except (ValueError, KeyError, TypeError):
            return None

    @property
    def audited(self) -> bool:
        return self.state == DOWN and self.audited_since_ms == self.since_ms


def observe(previous: Mapping[str, BookieState], registered: Mapping[str, bool], cookies: set[str],
            now_ms: int) -> dict[str, BookieState]:
    """New states from the registrations (bookie id -> read_only) and the cookies. A state that
    did not change keeps its since-when."""
    out: dict[str, BookieState] = {}
    for bookie_id in sorted(set(registered) | cookies):
        if bookie_id in registered:
            state = READ_ONLY if registered[bookie_id] else UP
        else:
            state = DOWN
        old = previous.get(bookie_id)
        if old is not None and old.state == state:
            out[bookie_id] = old
        else:
            out[bookie_id] = BookieState(bookie_id, state, now_ms)
    return out


def lost(states: Mapping[str, BookieState], now_ms: int, grace_ms: int) -> set[str]:
    return {b for b, s in states.items() if s.state == DOWN and now_ms - s.since_ms >= grace_ms}


def with_audited(state: BookieState) -> BookieState:
    return replace(state, audited_since_ms=state.since_ms)


def forget_audits(states: Mapping[str, BookieState]) -> dict[str, BookieState]:
    """The states with no loss counted as audited; the down-since stays (no second grace period).

    For an auditor that did not watch the registrations all along: one newly elected, or one
    whose registration watch fired. A lost bookie may have come back meanwhile, been placed in
    new ledgers or fragments, and gone again, with no listing seeing it up: trusting "audited"
    then leaves those ledgers unmarked for good (simulator seed 6889: the leader crashed, the
    lost bookie restarted and took a new ledger, went down again, and the next leader found the
    predecessor's state DOWN and audited). So such a loss is scanned again."""
    return {b: replace(s, audited_since_ms=0) for b, s in states.items()}
