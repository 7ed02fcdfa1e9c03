"""The invariants of autorecovery (re-replication of lost bookies), beside checker.py's.

- Copy before commit: when a swap commits, the replacement holds (durably, intact, the exact
  bytes) every entry of the fragment whose write set names it.
- No hole invented: every copy a worker takes from a replica is an entry that replica holds,
  with the payload of (ledger, entry).
- At the end (after the heal and enough time): no under-replication mark and no swap record is
  left; no CLOSED ledger names a bookie lost for good in any fragment; every entry of a
  ledger that was marked is held, exact bytes, by every bookie a swap put in its write set, and
  (checker.py) by A bookies of its write set.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from pyspark_ledger.testing.sim.bookie import SimBookie, SimEntry
from pyspark_ledger.testing.sim.checker import Checker
from pyspark_ledger.testing.sim.metastore import CLOSED, LedgerMeta, MetaStore
from pyspark_ledger.testing.sim.recovery_store import RecoveryStore


class RecoveryChecker:
    def __init__(self, checker: Checker, store: MetaStore, rstore: RecoveryStore, bookies: Mapping[str, SimBookie]):
        self.checker, self.store, self.rstore, self.bookies = checker, store, rstore, bookies
        self.swapped_in: set[tuple[int, int, str]] = set()  # (ledger, fragment index, replacement)

    def on_copy_read(self, worker: str, source: str, copy: SimEntry) -> None:
        """A worker read `copy` from `source` to copy it: the source holds exactly that."""
        self.checker.checks += 1
        self.checker.check_copy(f"{worker} (copying from {source})", copy)
        lc = self.bookies[source].ledgers.get(copy.ledger)
        if lc is None or lc.get(copy.entry_id) != copy:
            self.checker.fail(f"{worker} copied entry {copy.entry_id} of ledger {copy.ledger} from {source}, "
                              f"which does not hold it: a hole filled with invented bytes")

    def on_swap_committed(self, worker: str, meta: LedgerMeta, index: int, new: str) -> None:
        """`worker`'s commit put `new` in fragment `index`: it holds every entry it is named for."""
        self.checker.checks += 1
        self.swapped_in.add((meta.ledger, index, new))
        self._check_replacement(meta, index, new, f"when {worker} committed the swap")

    def _check_replacement(self, meta: LedgerMeta, index: int, new: str, when: str, corrupt_ok: bool = False) -> None:
        """`new` durably holds every entry of fragment `index` it is named for; intact, unless
        `corrupt_ok` (at the end: a corrupt-copy fault may have hit the copy after the commit,
        which production's scrubber repairs and this simulator does not model; checker.py still
        requires an intact copy of every entry somewhere in its write set)."""
        fragment = meta.fragments[index]
        if new not in fragment.ensemble:
            return  # swapped out again since (another loss): that swap was checked itself
        for eid in range(fragment.first_entry_id, meta.fragment_last_entry(index) + 1):
            if new not in meta.write_set(eid):
                continue
            copy, corrupt = self.bookies[new].synced_copy(meta.ledger, eid)
            if copy is None or (corrupt and not corrupt_ok):
                self.checker.fail(f"entry {eid} of ledger {meta.ledger} is named on {new} (fragment {index}) "
                                  f"{when}, which holds {'a corrupt copy' if corrupt else 'no durable copy'}")
            else:
                self.checker.check_copy(new, copy)

    def at_end(self, lost_for_good: Collection[str]) -> None:
        if self.rstore.marks:
            self.checker.fail(f"under-replication marks left at the end: "
                              f"{ {lid: sorted(m[0]) for lid, m in sorted(self.rstore.marks.items())} }")
        if self.rstore.swaps:
            self.checker.fail(f"swap records left at the end: {sorted(self.rstore.swaps)}")
        for ledger in sorted(self.store.ledgers):
            meta, _ = self.store.read(ledger)
            if meta.state != CLOSED:
                continue  # checker.py fails it first
            named = {b for f in meta.fragments for b in f.ensemble}
            if named & set(lost_for_good):
                self.checker.fail(f"ledger {ledger} still names lost bookies {sorted(named & set(lost_for_good))} "
                                  f"at the end: {meta.fragments}")
        for ledger, index, new in sorted(self.swapped_in):
            meta, _ = self.store.read(ledger)
            self._check_replacement(meta, index, new, "at the end", corrupt_ok=True)
