"""Replica replacement as a resumable two-phase change (issue 20, item 2; Oxia's node swap).

    prepare   /autorecovery/swaps/<qualified name>/<fragment>_<lost bookie> = {new, holder, since}
    copy      the fragment's entries to `new` (recovery adds: idempotent, may run any number of times)
    commit    compare-and-set of the ledger's ensemble: `lost` -> `new` in that fragment
    clean up  delete the record

A replication worker (which holds the ledger's claim, so a record it finds was left by a worker
that died) that re-replicates a fragment and finds a record:
- before the commit, with the recorded replacement still writable and not in the fragment:
  finishes it (copies again to the same bookie, commits): the copy made so far is not wasted;
- before the commit, with the replacement gone or taken: rolls it back (a new choice replaces the
  record; what was copied to the old replacement is unreferenced garbage, never a hole);
- after the commit (the fragment no longer names the lost bookie): only deletes the record.
Callers without the claim (`ledger recover --bookie`) record their own choice over any record
(the other writer may be alive): rereplicate(resume_swaps=False).
Safety never rests on the record: the commit re-applies the replacement to the ensemble the
metadata holds then (rereplication.rebase_replacements), so two workers on one fragment are safe.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from metadata import LedgerId
from metadata.context import now_ms
from metadata.errors import BadVersionError, MetadataError, NodeExistsError, NoNodeError
from metadata.paths import ledger_swaps_path, replica_swap_path
from metadata.store import MetadataStore

log = logging.getLogger(__name__)

# The steps a swap goes through; tests kill a worker right after each (rereplicate's on_step).
STEP_PREPARED = "prepared"
STEP_COPYING = "copying"  # after the first batch reached the replacement
STEP_COPIED = "copied"
STEP_COMMITTED = "committed"
SWAP_STEPS = (STEP_PREPARED, STEP_COPYING, STEP_COPIED, STEP_COMMITTED)


@dataclass(frozen=True, slots=True)
class SwapRecord:
    ledger_id: LedgerId
    fragment: int
    lost: str
    new: str
    holder: str
    since_ms: int

    def to_bytes(self) -> bytes:
        return json.dumps({"ledger": self.ledger_id.qualified_name, "fragment": self.fragment, "lost": self.lost,
                           "new": self.new, "holder": self.holder, "sinceMs": self.since_ms}, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> SwapRecord | None:
        try:
            d = json.loads(data)
            return cls(LedgerId.from_qualified_name(d["ledger"]), int(d["fragment"]), str(d["lost"]), str(d["new"]),
                       str(d.get("holder", "")), int(d.get("sinceMs", 0)))
        except (ValueError, KeyError, TypeError):
            return None


class SwapRecords:
    def __init__(self, store: MetadataStore):
        self.store = store

    def get(self, lid: LedgerId, fragment: int, lost: str) -> tuple[SwapRecord | None, int] | None:
        """(record, version), record None if unreadable; None if there is no record."""
        got = self.store.get(replica_swap_path(lid, fragment, lost))
        return None if got is None else (SwapRecord.from_bytes(got.value), got.version)

    def prepare(self, record: SwapRecord, replacing_version: int | None) -> None:
        """Record the change before copying: create, or replace the record read at that version.
        A concurrent writer of the same record wins; ours is then only advisory (see module doc)."""
        path = replica_swap_path(record.ledger_id, record.fragment, record.lost)
        try:
            if replacing_version is None:
                self.store.create(path, record.to_bytes())
            else:
                self.store.compare_and_set(path, record.to_bytes(), replacing_version)
        except (NodeExistsError, BadVersionError, NoNodeError):
            log.info("another worker prepared the same swap meanwhile ledger=%s fragment=%d lost=%s",
                        record.ledger_id, record.fragment, record.lost)

    def done(self, lid: LedgerId, fragment: int, lost: str) -> None:
        try:
            self.store.delete(replica_swap_path(lid, fragment, lost))
        except NoNodeError:
            pass
        self._drop_parent_if_empty(lid)

    def clear_ledger(self, lid: LedgerId) -> int:
        """Delete every record of a ledger (after its re-replication is done). Returns how many."""
        names = self.store.children(ledger_swaps_path(lid))
        for name in names:
            try:
                self.store.delete(f"{ledger_swaps_path(lid)}/{name}")
            except NoNodeError:
                pass
        self._drop_parent_if_empty(lid)
        return len(names)

    def _drop_parent_if_empty(self, lid: LedgerId) -> None:
        try:
            if not self.store.children(ledger_swaps_path(lid)):
                self.store.delete(ledger_swaps_path(lid))
        except (NoNodeError, MetadataError):
            pass  # gone already, or a record appeared meanwhile: it stays


def new_record(lid: LedgerId, fragment: int, lost: str, new: str, holder: str) -> SwapRecord:
    return SwapRecord(lid, fragment, lost, new, holder, now_ms())
