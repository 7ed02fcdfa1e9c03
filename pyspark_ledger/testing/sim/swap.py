"""One fragment's replica swap (autorecovery/rereplication.py _rereplicate_fragment), step by step.

read the fragment and the swap record -> decide (the product's replica_swap.decide_swap) ->
prepare (record the replacement) -> copy the entries the lost bookie's slot covers from the
surviving replicas (entry reads, then recovery adds in bounded batches: replicate.py) -> commit
(CAS of the ensemble re-based with rebase_replacements on the metadata as it is then) -> clean up
(delete the record). A replacement that joined the fragment in another slot meanwhile is chosen
again, at most REPLACEMENT_ATTEMPTS_MAX times. The worker may crash after each step
(worker.step_done says whether it goes on).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, cast

from pyspark_ledger.protocol.distribution import write_set_of
from pyspark_ledger.protocol.ensemble_change import rebase_replacements
from pyspark_ledger.protocol.replica_swap import COMMITTED, FINISH, ROLL_BACK, SwapDecision, decide_swap
from pyspark_ledger.testing.sim.actor import Actor, Cluster
from pyspark_ledger.testing.sim.bookie import PRESENT, SimBookie, SimEntry
from pyspark_ledger.testing.sim.metastore import LedgerMeta
from pyspark_ledger.testing.sim.recovery_store import RecoveryStore, SwapEntry
from pyspark_ledger.testing.sim.replicate import REPLICATE_BATCH_ENTRIES_MAX, replicate
from pyspark_ledger.testing.sim.world import World

REPLACEMENT_ATTEMPTS_MAX = 3
READ_TIMEOUT_S = 0.2

STEP_PREPARED, STEP_COPYING, STEP_COPIED, STEP_COMMITTED = "prepared", "copying", "copied", "committed"

# (ok, why) when the swap ended: ok also when the fragment needs nothing (committed before)
SwapEnd = Callable[[bool, str], None]


class SwapWorker(Protocol):
    """What a swap needs of its worker (repl_worker.SimReplicationWorker)."""

    name: str
    cluster: Cluster
    world: World
    rstore: RecoveryStore

    def meta_call(self, op: Callable[[], Any], then: Callable[[Any], None], label: str) -> None: ...

    def call_bookie(self, bookie_id: str, request: Callable[[SimBookie, Callable[[Any], None]], None],
                    on_reply: Callable[[Any], None], on_timeout: Callable[[], None], timeout_s: float,
                    label: str) -> None: ...

    def step_done(self, step: str, replacement: str) -> bool: ...


class FragmentSwap:
    def __init__(self, worker: SwapWorker, ledger: int, index: int, lost: str, on_end: SwapEnd):
        self.worker, self.cluster = worker, worker.cluster
        self.world = worker.world
        self.rstore = worker.rstore
        self.ledger, self.index, self.lost = ledger, index, lost
        self.key = (ledger, index, lost)
        self.on_end = on_end

    def start(self, attempts_left: int = REPLACEMENT_ATTEMPTS_MAX) -> None:
        if attempts_left <= 0:
            self.on_end(False, f"no replacement for {self.lost} stuck after {REPLACEMENT_ATTEMPTS_MAX} attempts")
            return
        lost, key = self.lost, self.key

        def op() -> object:
            meta, _ = self.cluster.store.read(self.ledger)
            record = self.rstore.swaps.get(key)
            writable = [b for b in self.cluster.writable_bookies() if b != lost]
            fragment = meta.fragments[self.index].ensemble
            decision = decide_swap(fragment, lost, record is not None, None if record is None else record.new,
                                   writable, resume_swaps=True)
            if decision.action == COMMITTED:
                self.rstore.delete_swap(key)  # a predecessor committed and died before its clean-up
            return meta, decision, record, writable

        self.worker.meta_call(op, lambda r: self._decided(r, attempts_left), f"swap {self.key} read")

    def _decided(self, result: object, attempts_left: int) -> None:
        meta, decision, record, writable = cast(tuple[LedgerMeta, SwapDecision, "SwapEntry | None", list[str]], result)
        stats = self.world.stats
        if decision.action == COMMITTED:
            stats["swaps_found_committed" if record is None else "swaps_cleaned_after_predecessor_commit"] += 1
            self.on_end(True, "the fragment no longer names the lost bookie")
            return
        if decision.action == FINISH:
            stats["swaps_resumed_from_record"] += 1
            new = cast(str, decision.new)
            self.world.note(f"{self.worker.name} finishes {record.holder if record else '?'}'s swap {self.key} -> {new}")
            if self.worker.step_done(STEP_PREPARED, new):
                self._copy(meta, new, attempts_left)
            return
        if decision.action == ROLL_BACK:
            stats["swaps_rolled_back"] += 1
        fragment = meta.fragments[self.index].ensemble
        candidates = sorted(b for b in writable if b not in fragment)
        if not candidates:
            self.on_end(False, f"no writable bookie outside {list(fragment)} to replace {self.lost}")
            return
        placement = self.cluster.placement
        if placement is not None:
            new = placement.replacement(fragment, candidates, self.lost, meta.write_quorum_size) or candidates[0]
        else:
            new = self.world.rng.choice(candidates)
        replacing = None if record is None else record.version
        holder = self.worker.name

        def prepared(ok: object) -> None:
            self.world.note(f"{holder} prepared swap {self.key} -> {new}" + ("" if ok else " (lost the race)"))
            if self.worker.step_done(STEP_PREPARED, new):
                self._copy(meta, new, attempts_left)

        self.worker.meta_call(lambda: self.rstore.prepare_swap(self.key, new, holder, replacing), prepared,
                              f"swap {self.key} prepare")

    # ---- copy ----------------------------------------------------------------------------------

    def _copy(self, meta: LedgerMeta, new: str, attempts_left: int) -> None:
        """Copy, to `new`, every entry of the fragment whose write set holds the lost bookie's slot
        (in the fragment as read: the swap keeps the slot)."""
        fragment = meta.fragments[self.index]
        needed = [e for e in range(fragment.first_entry_id, meta.fragment_last_entry(self.index) + 1)
                  if self.lost in write_set_of(e, fragment.ensemble, meta.write_quorum_size)]
        self.world.stats["swaps_copies_started"] += 1
        if self.cluster.bookies[self.lost].up:
            self.world.stats["swaps_copying_while_the_lost_bookie_is_back"] += 1
        self._copy_batch(meta, new, needed, 0, attempts_left)

    def _copy_batch(self, meta: LedgerMeta, new: str, needed: list[int], done: int, attempts_left: int) -> None:
        if done >= len(needed):
            if self.worker.step_done(STEP_COPIED, new):
                self._commit(new, attempts_left)
            return
        batch = needed[done:done + REPLICATE_BATCH_ENTRIES_MAX]
        got: list[SimEntry] = []

        def read_next() -> None:
            if len(got) == len(batch):
                write()
                return
            eid = batch[len(got)]
            members = list(write_set_of(eid, meta.fragments[self.index].ensemble, meta.write_quorum_size))
            self.world.rng.shuffle(members)

            def one(copy: SimEntry | None) -> None:
                if copy is None:
                    self.on_end(False, f"entry {self.ledger}/{eid}: no replica could be read")
                else:
                    got.append(copy)
                    read_next()

            self._read_entry(eid, members, one)

        def written(acks: dict[int, int], failed: set[str]) -> None:
            if failed or any(acks.get(c.entry_id, 0) < 1 for c in got):
                self.on_end(False, f"copying {len(got)} entries to {new} failed")
                return
            self.world.stats["swap_copy_batches"] += 1
            if done == 0 and not self.worker.step_done(STEP_COPYING, new):
                return
            self._copy_batch(meta, new, needed, done + len(batch), attempts_left)

        def write() -> None:
            replicate(cast(Actor, self.worker), self.ledger, [(c, (new,)) for c in got], written)

        read_next()

    def _read_entry(self, eid: int, members: list[str], then: Callable[[SimEntry | None], None]) -> None:
        """One entry from the first replica (in `members`' order) that answers with an intact copy."""
        if not members:
            then(None)
            return
        b, rest = members[0], members[1:]

        def arrived(reply: object) -> None:
            rows = reply if isinstance(reply, list) else []
            if rows and rows[0][1] == PRESENT:
                copy = rows[0][2]
                self.cluster.checker_recovery.on_copy_read(self.worker.name, b, copy)
                then(copy)
            else:
                self._read_entry(eid, rest, then)

        def request(bookie: SimBookie, respond: Callable[[object], None]) -> None:
            reply = bookie.read(self.ledger, eid, eid, 1, fence=False)
            if reply is not None:
                respond(reply)

        self.worker.call_bookie(b, request, arrived, lambda: arrived(None), READ_TIMEOUT_S,
                                f"copy read {self.ledger}/{eid}")

    # ---- commit, clean up ----------------------------------------------------------------------

    def _commit(self, new: str, attempts_left: int) -> None:
        lost, index = self.lost, self.index

        def op() -> object:
            meta, version = self.cluster.store.read(self.ledger)
            if rebase_replacements(meta.fragments[index].ensemble, {lost: new}) is None:
                return meta.fragments[index].ensemble, False  # replaced by another, or ours took another slot
            changed = meta.with_replaced_bookie(index, lost, new)
            self.cluster.store.cas(changed, version)
            self.cluster.checker_recovery.on_swap_committed(self.worker.name, changed, index, new)
            return changed.fragments[index].ensemble, True

        def then(result: object) -> None:
            ensemble, ours = cast(tuple[tuple[str, ...], bool], result)
            if lost in ensemble:
                self.world.stats["swaps_replacement_taken_choosing_again"] += 1
                self.start(attempts_left - 1)
                return
            self.world.stats["swaps_committed" if ours else "swaps_committed_by_another"] += 1
            if self.worker.step_done(STEP_COMMITTED, new):
                self.worker.meta_call(lambda: self.rstore.delete_swap(self.key),
                                      lambda _: self.on_end(True, f"swapped in {new}"), f"swap {self.key} clean up")

        self.worker.meta_call(op, then, f"swap {self.key} commit")

