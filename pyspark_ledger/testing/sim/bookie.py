"""A simulated bookie: per-ledger entries behind a journal, fencing, byte-capped reads, faults.

An add lands in memory at once (reads see it) and is acknowledged only when the journal's group
sync completes; a crash loses every copy not yet synced, so an acknowledged copy survives a
restart. The fence bit is journaled before the fence is answered (it survives crashes too).
Faults: crash/restart, fsync failure (the adds of that sync fail), disk full (read-only: adds
refused, reads and fences served), a corrupted copy (its digest no longer matches), slowness.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark_ledger.testing.sim.world import World

JOURNAL_SYNC_S = 0.002

OK, FENCED, READONLY, IO_ERROR = "OK", "FENCED", "READONLY", "IO_ERROR"
PRESENT, CORRUPT, NO_ENTRY = "PRESENT", "CORRUPT", "NO_ENTRY"


@dataclass(frozen=True, slots=True)
class SimEntry:
    """One entry as written: its payload is a pure function of (ledger, entry) (payload.py), so
    a lost or changed copy is detectable; `lac` and `length` are the header a writer sends."""

    ledger: int
    entry_id: int
    token: int
    size: int
    length: int
    lac: int


@dataclass(slots=True)
class LedgerCopies:
    synced: dict[int, SimEntry] = field(default_factory=dict)
    unsynced: dict[int, SimEntry] = field(default_factory=dict)
    corrupt: set[int] = field(default_factory=set)  # synced copies whose bytes were flipped
    fenced: bool = False
    lac: int = -1  # highest LAC piggybacked by the writer's adds

    def get(self, entry_id: int) -> SimEntry | None:
        copy = self.unsynced.get(entry_id)
        return copy if copy is not None else self.synced.get(entry_id)

    def last_held(self) -> int:
        return max(max(self.synced, default=-1), max(self.unsynced, default=-1))


Respond = Callable[[str], None]


class SimBookie:
    def __init__(self, world: World, bookie_id: str):
        self.world = world
        self.id = bookie_id
        self.up = True
        self.readonly = False
        self.fsync_failing = False
        self.incarnation = 0  # bumps on crash: a sync scheduled before it is void
        self.ledgers: dict[int, LedgerCopies] = {}
        self._journal: list[tuple[int, SimEntry, Respond]] = []
        self._sync_scheduled = False

    def copies(self, ledger: int) -> LedgerCopies:
        lc = self.ledgers.get(ledger)
        if lc is None:
            lc = self.ledgers[ledger] = LedgerCopies()
        return lc

    # ---- requests (a bookie that is down never answers) ---------------------------------------

    def add(self, entry: SimEntry, recovery: bool, respond: Respond) -> None:
        if not self.up:
            return
        lc = self.copies(entry.ledger)
        if lc.fenced and not recovery:
            respond(FENCED)
            return
        if self.readonly:
            respond(READONLY)
            return
        if entry.entry_id not in lc.synced or entry.entry_id in lc.corrupt:
            lc.unsynced[entry.entry_id] = entry
        if not recovery and entry.lac > lc.lac:
            lc.lac = entry.lac
        self._journal.append((entry.ledger, entry, respond))
        if not self._sync_scheduled:
            self._sync_scheduled = True
            incarnation = self.incarnation
            self.world.at(JOURNAL_SYNC_S, lambda: self._sync(incarnation), f"{self.id} journal sync")

    def _sync(self, incarnation: int) -> None:
        if incarnation != self.incarnation:
            return  # the bookie crashed since: those adds are gone unanswered
        self._sync_scheduled = False
        batch, self._journal = self._journal, []
        failing = self.fsync_failing
        for ledger, entry, respond in batch:
            lc = self.copies(ledger)
            if lc.unsynced.get(entry.entry_id) is entry:
                del lc.unsynced[entry.entry_id]
                if not failing:
                    lc.synced[entry.entry_id] = entry
                    lc.corrupt.discard(entry.entry_id)
            respond(IO_ERROR if failing else OK)

    def fence(self, ledger: int) -> int | None:
        """Fence the ledger here; returns the LAC this bookie knows (None: down)."""
        if not self.up:
            return None
        lc = self.copies(ledger)
        lc.fenced = True
        return lc.lac

    def read_lac(self, ledger: int) -> tuple[int, int] | None:
        """(LAC, last entry held) for a tailing reader (None: down)."""
        if not self.up:
            return None
        lc = self.ledgers.get(ledger)
        return (-1, -1) if lc is None else (lc.lac, lc.last_held())

    def read(self, ledger: int, first: int, last: int, max_bytes: int,
             fence: bool) -> list[tuple[int, str, SimEntry | None]] | None:
        """Entries first..last: always the first, then until `max_bytes` would be exceeded."""
        if not self.up:
            return None
        if fence:
            self.copies(ledger).fenced = True
        lc = self.ledgers.get(ledger)
        out: list[tuple[int, str, SimEntry | None]] = []
        total = 0
        for eid in range(first, last + 1):
            copy = lc.get(eid) if lc is not None else None
            size = copy.size if copy is not None else 0
            if out and total + size > max_bytes:
                break
            total += size
            if copy is None:
                out.append((eid, NO_ENTRY, None))
            elif eid in lc.corrupt and eid not in lc.unsynced:  # type: ignore[union-attr]  # a copy implies its ledger's state
                out.append((eid, CORRUPT, None))
            else:
                out.append((eid, PRESENT, copy))
        return out

    # ---- faults -------------------------------------------------------------------------------

    def crash(self) -> None:
        self.up = False
        self.incarnation += 1
        self._journal = []
        self._sync_scheduled = False
        for lc in self.ledgers.values():
            lc.unsynced.clear()
            lc.lac = max((c.lac for c in lc.synced.values()), default=-1)

    def restart(self) -> None:
        self.up = True

    def synced_copy(self, ledger: int, entry_id: int) -> tuple[SimEntry | None, bool]:
        """The durable copy here and whether it is corrupt (for the checker)."""
        lc = self.ledgers.get(ledger)
        if lc is None:
            return None, False
        copy = lc.synced.get(entry_id)
        return copy, copy is not None and entry_id in lc.corrupt
