"""The invariants every history must keep, checked at each step that could break them and at
the end. A broken one raises Violation (the run stops there and the seed is reported).

- No acknowledged entry is lost or changed: every copy read or recovered carries the payload
  of (ledger, entry); a closed ledger ends at or after every acknowledged entry.
- Copies: an acknowledged entry is on >= A bookies (durable, synced copies) of the write set
  the metadata names for it, when a writer's fragment CAS succeeds and at the end.
- Completions come in entry order and the LAC never moves back.
- No reader returns an entry past the LAC of an open ledger or the last entry of a closed one.
- Every recovery's result is the ledger's one close (last entry and length never change once
  CLOSED, and the length is that of the entries through the last).
- A writer's view (fragments) equals the metadata right after its own CAS.
- Liveness: after the heal every operation ends and no ledger is left OPEN or IN_RECOVERY.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark_ledger.testing.sim.bookie import SimBookie, SimEntry
from pyspark_ledger.testing.sim.metastore import CLOSED, LedgerMeta, MetaStore
from pyspark_ledger.testing.sim.payload import length_through, size_of, token_of
from pyspark_ledger.testing.sim.world import Violation, World


class Checker:
    def __init__(self, world: World, store: MetaStore, bookies: Mapping[str, SimBookie]):
        self.world = world
        self.store = store
        self.bookies = bookies
        self.writer_lac: dict[tuple[str, int], int] = {}  # (writer, ledger) -> its LAC as the checker saw it grow
        self.acked: dict[int, int] = {}  # ledger -> highest acknowledged entry (by any writer)
        self.closes: dict[int, tuple[int, int]] = {}  # ledger -> (last entry, length) once CLOSED
        self.checks = 0
        store.on_closed = lambda meta: self.on_closed("the close CAS", meta)

    def fail(self, what: str) -> None:
        self.world.note(f"VIOLATION {what}")
        raise Violation(what)

    # ---- writers -------------------------------------------------------------------------------

    def on_completed(self, writer: str, ledger: int, lac: int, entry_ids: Sequence[int]) -> None:
        """A writer's PendingAdds completed these entries and now reports LAC `lac`: they must
        follow the last ones it completed, in order, and the LAC is the last of them."""
        self.checks += 1
        expect = self.writer_lac.get((writer, ledger), -1) + 1
        for eid in entry_ids:
            if eid != expect:
                self.fail(f"{writer} completed entry {eid} of ledger {ledger} out of order (expected {expect})")
            expect += 1
        if entry_ids and lac != entry_ids[-1]:
            self.fail(f"{writer}'s LAC {lac} is not its last completed entry {entry_ids[-1]}")
        if entry_ids:
            top = entry_ids[-1]
            self.writer_lac[(writer, ledger)] = top
            self.acked[ledger] = max(self.acked.get(ledger, -1), top)
            closed = self.closes.get(ledger)
            if closed is not None and top > closed[0]:
                self.fail(f"{writer} acknowledged entry {top} of ledger {ledger}, which was closed at {closed[0]}")

    def on_fragment_cas(self, ledger: int) -> None:
        """A writer's fragment CAS just succeeded: every entry acknowledged so far is held by A
        bookies the metadata names for it."""
        self.checks += 1
        meta, _ = self.store.read(ledger)
        self._check_copies(meta, self.acked.get(ledger, -1), "at the writer's fragment CAS")

    def on_writer_view(self, writer: str, ledger: int, fragments: tuple[object, ...], version: int) -> None:
        """The writer adopted the result of its CAS: its view is exactly what it wrote."""
        self.checks += 1
        written = self.store.history.get((ledger, version))
        if written is None or written.fragments != fragments:
            self.fail(f"{writer}'s fragments {fragments} differ from the metadata it wrote (version "
                      f"{version}): {written.fragments if written else None}")

    def on_writer_closed(self, writer: str, ledger: int, lac: int, length: int) -> None:
        """The writer believes its ledger closed at its LAC: the metadata says exactly that."""
        self.checks += 1
        meta, _ = self.store.read(ledger)
        if meta.state != CLOSED or (meta.last_entry, meta.length) != (lac, length):
            self.fail(f"{writer} thinks ledger {ledger} closed at ({lac}, {length}); the metadata holds "
                      f"{meta.state} ({meta.last_entry}, {meta.length})")

    # ---- closing and recovery ------------------------------------------------------------------

    def on_closed(self, who: str, meta: LedgerMeta) -> None:
        """`who` wrote the CLOSED metadata."""
        self.checks += 1
        ledger = meta.ledger
        if ledger in self.closes:
            self.fail(f"ledger {ledger} closed twice ({self.closes[ledger]} then by {who})")
        self.closes[ledger] = (meta.last_entry, meta.length)
        acked = self.acked.get(ledger, -1)
        if meta.last_entry < acked:
            self.fail(f"{who} closed ledger {ledger} at {meta.last_entry}: acknowledged entry {acked} is lost")
        if meta.length != length_through(ledger, meta.last_entry):
            self.fail(f"{who} closed ledger {ledger} with length {meta.length}, entries say "
                      f"{length_through(ledger, meta.last_entry)}")
        self._check_copies(meta, meta.last_entry, f"when {who} closed it")

    def on_recovered(self, who: str, ledger: int, last_entry: int, length: int) -> None:
        """A recovery ended with this close (its own or one it adopted)."""
        self.checks += 1
        closed = self.closes.get(ledger)
        if closed != (last_entry, length):
            self.fail(f"{who} recovered ledger {ledger} to ({last_entry}, {length}) but it is closed at {closed}")

    # ---- readers -------------------------------------------------------------------------------

    def on_read(self, reader: str, copy: SimEntry) -> None:
        self.checks += 1
        self.check_copy(reader, copy)
        ledger, eid = copy.ledger, copy.entry_id
        meta, _ = self.store.read(ledger)
        if meta.state == CLOSED:
            if eid > meta.last_entry:
                self.fail(f"{reader} read entry {eid} of ledger {ledger}, closed at {meta.last_entry}")
        elif eid > self.acked.get(ledger, -1):
            self.fail(f"{reader} read entry {eid} of open ledger {ledger} past its LAC "
                      f"{self.acked.get(ledger, -1)}")

    def check_copy(self, who: str, copy: SimEntry) -> None:
        if copy.token != token_of(copy.ledger, copy.entry_id) or copy.size != size_of(copy.ledger, copy.entry_id):
            self.fail(f"{who} got a changed copy of entry {copy.entry_id} of ledger {copy.ledger}")

    # ---- copies --------------------------------------------------------------------------------

    def _check_copies(self, meta: LedgerMeta, through: int, when: str) -> None:
        for eid in range(through + 1):
            holders = 0
            intact = 0
            for b in meta.write_set(eid):
                copy, corrupt = self.bookies[b].synced_copy(meta.ledger, eid)
                if copy is not None:
                    self.check_copy(b, copy)
                    holders += 1
                    intact += 0 if corrupt else 1
            if holders < meta.ack_quorum_size or intact == 0:
                self.fail(f"entry {eid} of ledger {meta.ledger} is on {holders} bookies ({intact} intact) of its "
                          f"write set {list(meta.write_set(eid))} {when}; A={meta.ack_quorum_size}")

    # ---- the end -------------------------------------------------------------------------------

    def at_end(self, drained: bool, live_writers: Sequence[int]) -> None:
        if not drained:
            self.fail(f"operations still running at the end: {self.world.pending_labels()}")
        if live_writers:
            # Nothing is left to happen, yet a writer neither closed nor stopped: it is stuck.
            self.fail(f"the writers of ledgers {list(live_writers)} never ended (nothing left to wake them)")
        for ledger in sorted(self.store.ledgers):
            meta, _ = self.store.read(ledger)
            if meta.state != CLOSED and ledger not in live_writers:
                self.fail(f"ledger {ledger} is {meta.state} at the end with no live writer")
            if meta.state == CLOSED:
                self._check_copies(meta, meta.last_entry, "at the end")
                if meta.last_entry < self.acked.get(ledger, -1):
                    self.fail(f"ledger {ledger} closed at {meta.last_entry} below acknowledged "
                              f"{self.acked[ledger]}")
