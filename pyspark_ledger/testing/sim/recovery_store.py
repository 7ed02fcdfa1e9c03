"""The autorecovery part of the simulated metadata store: locks, bookie states, marks, swap records.

Mirrors metadata.ephemeral_lock, metadata.underreplication and autorecovery.swap_record:
- a lock (the auditor's election, a worker's claim on a ledger) belongs to a session of the
  MetaStore and is free once that session expired (an ephemeral node);
- an under-replication mark is (lost bookies, version): merged by the auditor, deleted by a
  worker only at the version it read (an extended mark survives the delete);
- a swap record (ledger, fragment index, lost bookie) -> (new bookie, holder, version): created or
  replaced at the version read; a conflicting writer loses, as in SwapRecords.prepare;
- the bookies' audited states (bookie_states.BookieState), kept for the next auditor.
- the audit scan's cursor (audit_scan.ScanCursor, ledger ids in scope 0), resumed by the next auditor.
Every call runs as one metadata operation (Actor.meta_call gives it its latency).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark_ledger.autorecovery.audit_scan import ScanCursor
from pyspark_ledger.autorecovery.bookie_states import BookieState
from pyspark_ledger.testing.sim.metastore import MetaStore

SwapKey = tuple[int, int, str]  # (ledger, fragment index, lost bookie)


@dataclass(frozen=True, slots=True)
class SwapEntry:
    new: str
    holder: str
    version: int


class RecoveryStore:
    def __init__(self, store: MetaStore):
        self.store = store
        self.locks: dict[str, int] = {}  # lock path -> owning session
        self.marks: dict[int, tuple[frozenset[str], int]] = {}  # ledger -> (lost bookies, version)
        self.swaps: dict[SwapKey, SwapEntry] = {}
        self.bookie_states: dict[str, BookieState] = {}
        self.scan_cursor: ScanCursor | None = None  # /autorecovery/scan: the audit scan's position
        self.marked_ever: dict[int, set[str]] = {}  # for the checker: every bookie a ledger was marked for

    # ---- locks ----------------------------------------------------------------------------------

    def try_lock(self, path: str, session: int) -> bool:
        owner = self.locks.get(path)
        if owner is not None and owner != session and self.store.session_alive(owner):
            return False
        if not self.store.session_alive(session):
            return False
        self.locks[path] = session
        return True

    def holds(self, path: str, session: int) -> bool:
        return self.locks.get(path) == session and self.store.session_alive(session)

    def release(self, path: str, session: int) -> None:
        if self.locks.get(path) == session:
            del self.locks[path]

    # ---- marks ----------------------------------------------------------------------------------

    def mark(self, ledger: int, bookies: frozenset[str]) -> bool:
        """Merge `bookies` into the ledger's mark; True if the mark changed."""
        self.marked_ever.setdefault(ledger, set()).update(bookies)
        old = self.marks.get(ledger)
        if old is None:
            self.marks[ledger] = (bookies, 0)
            return True
        if bookies <= old[0]:
            return False
        self.marks[ledger] = (old[0] | bookies, old[1] + 1)
        return True

    def clear_mark(self, ledger: int, version: int) -> bool:
        """Delete the mark if it is still at `version` (gone already counts as cleared)."""
        got = self.marks.get(ledger)
        if got is None:
            return True
        if got[1] != version:
            return False
        del self.marks[ledger]
        return True

    # ---- swap records ---------------------------------------------------------------------------

    def prepare_swap(self, key: SwapKey, new: str, holder: str, replacing_version: int | None) -> bool:
        """Create the record, or replace the one read at `replacing_version`; False if another
        writer got there first (the caller goes on: the record is only advisory)."""
        got = self.swaps.get(key)
        if replacing_version is None and got is not None:
            return False
        if replacing_version is not None and (got is None or got.version != replacing_version):
            return False
        self.swaps[key] = SwapEntry(new, holder, 0 if got is None else got.version + 1)
        return True

    def delete_swap(self, key: SwapKey) -> None:
        self.swaps.pop(key, None)

    def clear_ledger_swaps(self, ledger: int) -> int:
        keys = [k for k in self.swaps if k[0] == ledger]
        for k in keys:
            del self.swaps[k]
        return len(keys)
