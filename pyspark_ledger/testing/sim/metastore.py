"""The simulated metadata store: versioned values, compare-and-set, sessions with ephemerals.

Ledger metadata follows the real state model (OPEN -> IN_RECOVERY -> CLOSED, fragments as
(first entry, ensemble)); a CAS with a stale version fails. A log's writer lock is an ephemeral
owned by a session: when the session expires the lock is gone, whatever its owner believes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from pyspark_ledger.errors import PySparkLedgerError
from pyspark_ledger.protocol.distribution import write_set_of
from pyspark_ledger.testing.sim.world import Violation

OPEN, IN_RECOVERY, CLOSED = "OPEN", "IN_RECOVERY", "CLOSED"


class BadVersion(PySparkLedgerError):
    pass


@dataclass(frozen=True, slots=True)
class Fragment:
    first_entry_id: int
    ensemble: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LedgerMeta:
    ledger: int
    write_quorum_size: int
    ack_quorum_size: int
    fragments: tuple[Fragment, ...]
    state: str = OPEN
    last_entry: int = -1
    length: int = 0

    def ensemble_for(self, entry_id: int) -> tuple[str, ...]:
        chosen = self.fragments[0].ensemble
        for f in self.fragments:
            if f.first_entry_id <= entry_id:
                chosen = f.ensemble
        return chosen

    def write_set(self, entry_id: int) -> tuple[str, ...]:
        return write_set_of(entry_id, self.ensemble_for(entry_id), self.write_quorum_size)

    def with_fragment(self, first_entry_id: int, ensemble: tuple[str, ...]) -> LedgerMeta:
        """A new fragment from `first_entry_id` (replacing the last one if it starts there)."""
        kept = tuple(f for f in self.fragments if f.first_entry_id < first_entry_id)
        return replace(self, fragments=kept + (Fragment(first_entry_id, ensemble),))

    def with_replaced_bookie(self, index: int, lost: str, new: str) -> LedgerMeta:
        """Fragment `index` with `lost` replaced by `new` in its slot (a re-replication's commit)."""
        f = self.fragments[index]
        ensemble = tuple(new if b == lost else b for b in f.ensemble)
        return replace(self, fragments=self.fragments[:index] + (Fragment(f.first_entry_id, ensemble),)
                       + self.fragments[index + 1:])

    def fragment_last_entry(self, index: int) -> int:
        """The last entry of fragment `index` of a CLOSED ledger (below its first: empty)."""
        if index + 1 < len(self.fragments):
            return self.fragments[index + 1].first_entry_id - 1
        return self.last_entry

    def start_recovery(self) -> LedgerMeta:
        return replace(self, state=IN_RECOVERY)

    def close(self, last_entry: int, length: int) -> LedgerMeta:
        return replace(self, state=CLOSED, last_entry=last_entry, length=length)


@dataclass(frozen=True, slots=True)
class LogRecord:
    ledgers: tuple[int, ...] = ()
    owner_session: int | None = None  # the ephemeral writer lock


class MetaStore:
    def __init__(self) -> None:
        self.ledgers: dict[int, tuple[LedgerMeta, int]] = {}
        self.history: dict[tuple[int, int], LedgerMeta] = {}  # (ledger, version) -> value, for the checker
        self.log: tuple[LogRecord, int] = (LogRecord(), 0)
        self.sessions: dict[int, bool] = {}
        self.next_ledger_id = 1
        self.next_session_id = 1
        self.on_closed: Callable[[LedgerMeta], None] = lambda meta: None  # the checker watches closes

    def new_session(self) -> int:
        sid = self.next_session_id
        self.next_session_id += 1
        self.sessions[sid] = True
        return sid

    def session_alive(self, sid: int) -> bool:
        return self.sessions.get(sid, False)

    def expire(self, sid: int) -> None:
        """The session is gone: so is the lock it owned (an ephemeral node)."""
        self.sessions[sid] = False
        record, version = self.log
        if record.owner_session == sid:
            self.log = (replace(record, owner_session=None), version + 1)

    def create_ledger(self, ensemble: tuple[str, ...], write_quorum_size: int, ack_quorum_size: int) -> LedgerMeta:
        lid = self.next_ledger_id
        self.next_ledger_id += 1
        meta = LedgerMeta(lid, write_quorum_size, ack_quorum_size, (Fragment(0, ensemble),))
        self.ledgers[lid] = (meta, 0)
        self.history[(lid, 0)] = meta
        return meta

    def read(self, ledger: int) -> tuple[LedgerMeta, int]:
        return self.ledgers[ledger]

    def cas(self, meta: LedgerMeta, version: int) -> int:
        current, cur_version = self.ledgers[meta.ledger]
        if cur_version != version:
            raise BadVersion(f"ledger {meta.ledger}: version {version} is stale (now {cur_version})")
        if current.state == CLOSED and meta != current and not _only_ensembles_differ(current, meta):
            raise Violation(f"ledger {meta.ledger}: a CLOSED ledger's metadata never changes (but for "
                            f"a re-replication's bookie swap)")
        self.ledgers[meta.ledger] = (meta, version + 1)
        self.history[(meta.ledger, version + 1)] = meta
        if meta.state == CLOSED and current.state != CLOSED:
            self.on_closed(meta)
        return version + 1

    def bump(self, ledger: int) -> None:
        """Another client rewrote the value (same content, new version): the next CAS conflicts."""
        meta, version = self.ledgers[ledger]
        self.ledgers[ledger] = (meta, version + 1)
        self.history[(ledger, version + 1)] = meta

    def log_cas(self, record: LogRecord, version: int) -> int:
        if self.log[1] != version:
            raise BadVersion(f"log: version {version} is stale (now {self.log[1]})")
        self.log = (record, version + 1)
        return version + 1


def _only_ensembles_differ(old: LedgerMeta, new: LedgerMeta) -> bool:
    """Only bookies in fragments changed (the fragments, their first entries, the state and the
    end stay): what re-replication may do to a CLOSED ledger."""
    return (replace(new, fragments=old.fragments) == old and len(new.fragments) == len(old.fragments)
            and all(a.first_entry_id == b.first_entry_id and len(a.ensemble) == len(b.ensemble)
                    for a, b in zip(old.fragments, new.fragments)))
