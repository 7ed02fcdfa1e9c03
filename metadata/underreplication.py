"""Under-replication marks: which ledgers lost a copy, of which bookies, since when.

    /underreplicated/<qualified name>   JSON {ledger, lostBookies, sinceMs, reason, markedBy}

The auditor (pyspark_ledger.autorecovery) writes a mark for every ledger with a fragment on a
lost bookie, and for every closed ledger whose write sets span too few racks (the bookies to
move off); `ledger decommissionbookie` writes marks for a bookie that is to leave; a bookie that
starts without one of its ledger directories (a wiped or failed disk) marks the ledgers that had
entries there, naming itself. Replication
workers clear a mark once every named bookie is gone from the ledger's ensembles. Every change is
a compare-and-set, so a worker never clears a mark the auditor extended meanwhile (a second lost
bookie): the delete names the version the worker read.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass

from metadata.context import now_ms
from metadata.errors import BadVersionError, CorruptMetadataError, NodeExistsError, NoNodeError
from metadata.ids import LedgerId
from metadata.paths import UNDERREPLICATED, underreplicated_path
from metadata.store import MetadataStore, RetryPolicy

REASON_LOST = "lost"  # the bookie's registration has been gone longer than the grace period
REASON_DECOMMISSION = "decommission"  # an operator asked for the bookie's fragments to move
REASON_LOST_DIRECTORY = "lost-directory"  # the bookie lost a ledger directory (wiped or failed disk)
# The ledger's write sets span too few racks: move these bookies' copies to other racks
# (pyspark_ledger/autorecovery/placement_scan.py). Only CLOSED ledgers are marked so.
REASON_MISPLACED = "misplaced"


@dataclass(frozen=True, slots=True)
class UnderReplication:
    ledger_id: LedgerId
    lost_bookies: tuple[str, ...]  # sorted
    since_ms: int
    reason: str
    marked_by: str

    def to_bytes(self) -> bytes:
        return json.dumps({"ledger": self.ledger_id.qualified_name, "lostBookies": list(self.lost_bookies),
                           "sinceMs": self.since_ms, "reason": self.reason, "markedBy": self.marked_by},
                          sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> UnderReplication:
        try:
            d = json.loads(data)
            return cls(LedgerId.from_qualified_name(d["ledger"]), tuple(sorted(d["lostBookies"])), int(d["sinceMs"]),
                       str(d.get("reason", REASON_LOST)), str(d.get("markedBy", "")))
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptMetadataError(f"unreadable under-replication mark: {exc}") from exc


class UnderReplicationManager:
    def __init__(self, store: MetadataStore, retry: RetryPolicy | None = None):
        self.store = store
        self.retry = retry or RetryPolicy()

    def mark(self, lid: LedgerId, bookies: Iterable[str], reason: str, marked_by: str) -> bool:
        """Record that `bookies` lost (or are to give up) their copies of `lid`; merged into an
        existing mark. Returns whether metadata changed (False: already marked for them)."""
        wanted = set(bookies)
        path = underreplicated_path(lid)
        for delay in [0.0, *self.retry.delays()]:
            time.sleep(delay)
            got = self.store.get(path)
            if got is None:
                mark = UnderReplication(lid, tuple(sorted(wanted)), now_ms(), reason, marked_by)
                try:
                    self.store.create(path, mark.to_bytes())
                    return True
                except NodeExistsError:
                    continue
            old = UnderReplication.from_bytes(got.value)
            if wanted <= set(old.lost_bookies):
                return False
            merged = UnderReplication(lid, tuple(sorted(wanted | set(old.lost_bookies))), old.since_ms, old.reason,
                                      marked_by)
            try:
                self.store.compare_and_set(path, merged.to_bytes(), got.version)
                return True
            except (BadVersionError, NoNodeError):
                continue
        raise BadVersionError(path, -1, -1)

    def get(self, lid: LedgerId) -> tuple[UnderReplication, int] | None:
        got = self.store.get(underreplicated_path(lid))
        return None if got is None else (UnderReplication.from_bytes(got.value), got.version)

    def ledger_ids(self) -> list[LedgerId]:
        return [LedgerId.from_qualified_name(n) for n in self.store.children(UNDERREPLICATED)]

    def list(self) -> list[UnderReplication]:
        out = []
        for lid in self.ledger_ids():
            got = self.get(lid)
            if got is not None:
                out.append(got[0])
        return out

    def clear(self, lid: LedgerId, version: int) -> bool:
        """Delete the mark if it is still the version read. False: it changed (read it again)."""
        try:
            self.store.delete(underreplicated_path(lid), version)
            return True
        except NoNodeError:
            return True
        except BadVersionError:
            return False
