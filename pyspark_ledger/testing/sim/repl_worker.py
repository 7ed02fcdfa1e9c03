"""A replication worker (autorecovery/replication_worker.py), as a simulated process.

It polls the under-replication marks, claims one with a lock of its session (a claim dies with
the session: SESSION_TIMEOUT_S after a crash), and for every marked bookie the ledger still names,
swaps it out of every fragment naming it (swap.FragmentSwap, the two-phase swap); then deletes the
ledger's swap records and the mark at the version read (an extended mark survives: worked on
again). A ledger not CLOSED yet waits (the sweep or its writer closes it); a failed swap leaves the
mark, and the ledger is tried again after a bounded back-off. The worker may crash after each step
of a swap (`step_crash`), and may be paused past its session (a zombie that goes on afterwards,
concurrently with the worker that took its claim over).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from pyspark_ledger.testing.sim.actor import Cluster
from pyspark_ledger.testing.sim.metastore import CLOSED, LedgerMeta
from pyspark_ledger.testing.sim.process import Process
from pyspark_ledger.testing.sim.recovery_store import RecoveryStore
from pyspark_ledger.testing.sim.swap import FragmentSwap

POLL_IDLE_S = 1.0
POLL_QUIET_S = 2.0  # once no more faults come (crashes_until_s): the same work, fewer events
POLL_BUSY_S = 0.05  # right after a ledger: look for the next one soon
CLAIM_ATTEMPTS_MAX = 8
BACKOFF_S_INITIAL = 0.25
BACKOFF_S_MAX = 2.0
RESTART_AFTER_S = (0.2, 1.5)
REPLACEMENT_FULL_SHARE = 0.3


def claim_path(ledger: int) -> str:
    return f"/autorecovery/locks/{ledger}"


class SimReplicationWorker(Process):
    def __init__(self, cluster: Cluster, rstore: RecoveryStore, name: str, stop_s: float, *,
                 step_crash: float, crashes_until_s: float):
        super().__init__(cluster, name)
        self.rstore = rstore
        self.stop_s = stop_s
        self.step_crash = step_crash  # chance of crashing after each step of a swap
        self.crashes_until_s = crashes_until_s
        self.backoff: dict[int, tuple[float, float]] = {}  # ledger -> (retry at, delay)

    def start(self) -> None:
        self.later(self.world.rng.uniform(0.0, POLL_IDLE_S), self._poll, "poll")

    def on_restart(self) -> None:
        self._poll()

    def _idle_s(self) -> float:
        return POLL_IDLE_S if self.world.now_s < self.crashes_until_s else POLL_QUIET_S

    def step_done(self, step: str, replacement: str) -> bool:
        """A swap step just ended: crash here (by the seed's draw), or go on. Some crashes take
        the replacement's disk with them for a while (full: read-only), so that the successor
        finds the recorded swap unfinishable and rolls it back."""
        world = self.world
        if not self.step_crash or world.now_s >= self.crashes_until_s or world.rng.random() >= self.step_crash:
            return True
        world.fault(f"worker_crash_after_{step}", self.name)
        self.crash(f"after {step}", world.rng.uniform(*RESTART_AFTER_S))
        if step != "committed" and world.rng.random() < REPLACEMENT_FULL_SHARE:
            bookie = self.cluster.bookies[replacement]
            if bookie.up and not bookie.readonly:
                world.fault("replacement_read_only", replacement)
                bookie.readonly = True
                world.at(world.rng.uniform(1.0, 3.0), lambda: setattr(bookie, "readonly", False),
                         f"{replacement} writable again")
        return False

    # ---- claiming ------------------------------------------------------------------------------

    def _poll(self) -> None:
        if self.world.now_s >= self.stop_s:
            return
        self.renew_session_if_expired()
        session, now = self.session, self.world.now_s
        candidates = [lid for lid in sorted(self.rstore.marks) if self.backoff.get(lid, (0.0, 0.0))[0] <= now]
        if not candidates:
            self.later(self._idle_s(), self._poll, "poll")
            return
        self.world.rng.shuffle(candidates)

        def op() -> int | None:
            for lid in candidates[:CLAIM_ATTEMPTS_MAX]:
                if lid in self.rstore.marks and self.rstore.try_lock(claim_path(lid), session):
                    return lid
            return None

        def then(claimed: object) -> None:
            if claimed is None:
                self.world.stats["claims_busy"] += 1
                self.later(self._idle_s(), self._poll, "poll")
            else:
                self._work_on(cast(int, claimed), session)

        self.meta_call(op, then, "claim a mark")

    def _work_on(self, ledger: int, session: int) -> None:
        def then(result: object) -> None:
            mark, (meta, _) = cast(tuple["tuple[frozenset[str], int] | None", tuple[LedgerMeta, int]], result)
            if mark is None:
                self._release(ledger, session, POLL_BUSY_S)  # another worker finished it
                return
            if meta.state != CLOSED:
                self.world.stats["claims_of_unclosed_ledgers"] += 1
                self._failed(ledger, session, f"ledger {ledger} is {meta.state}: waiting for its close")
                return
            lost_bookies, version = mark
            named = {b for f in meta.fragments for b in f.ensemble}
            self.world.stats["claims"] += 1
            self._next_bookie(ledger, session, sorted(lost_bookies & named), 0, version)

        self.meta_call(lambda: (self.rstore.marks.get(ledger), self.cluster.store.read(ledger)), then,
                       f"read mark {ledger}")

    def _next_bookie(self, ledger: int, session: int, lost: Sequence[str], i: int, version: int) -> None:
        if i >= len(lost):
            self._clear(ledger, session, version)
            return

        def then(result: object) -> None:
            meta = cast(tuple[LedgerMeta, int], result)[0]
            indexes = [k for k, f in enumerate(meta.fragments) if lost[i] in f.ensemble]
            self._next_fragment(ledger, session, lost, i, version, indexes, 0)

        self.meta_call(lambda: self.cluster.store.read(ledger), then, f"read {ledger} for {lost[i]}")

    def _next_fragment(self, ledger: int, session: int, lost: Sequence[str], i: int, version: int,
                       indexes: Sequence[int], j: int) -> None:
        if j >= len(indexes):
            self._next_bookie(ledger, session, lost, i + 1, version)
            return

        def ended(ok: bool, why: str) -> None:
            if ok:
                self._next_fragment(ledger, session, lost, i, version, indexes, j + 1)
            else:
                self._failed(ledger, session, why)

        FragmentSwap(self, ledger, indexes[j], lost[i], ended).start()

    # ---- the end of a claim --------------------------------------------------------------------

    def _clear(self, ledger: int, session: int, version: int) -> None:
        """Every marked bookie is out of the ledger: drop its swap records (a predecessor that
        died between commit and clean-up left one), then the mark at the version read."""
        def op() -> tuple[int, bool]:
            return self.rstore.clear_ledger_swaps(ledger), self.rstore.clear_mark(ledger, version)

        def then(result: object) -> None:
            left_over, cleared = cast(tuple[int, bool], result)
            self.world.stats["swap_records_of_dead_workers_cleared"] += left_over
            self.world.stats["marks_cleared" if cleared else "marks_extended_meanwhile"] += 1
            self.world.note(f"{self.name} {'cleared' if cleared else 'could not clear'} the mark of {ledger}")
            self.backoff.pop(ledger, None)
            self._release(ledger, session, POLL_BUSY_S)

        self.meta_call(op, then, f"clear mark {ledger}")

    def _failed(self, ledger: int, session: int, why: str) -> None:
        self.world.note(f"{self.name}: ledger {ledger} not repaired yet: {why}")
        self.world.stats["swap_attempts_failed"] += 1
        delay = min(BACKOFF_S_MAX, self.backoff.get(ledger, (0.0, BACKOFF_S_INITIAL / 2))[1] * 2)
        self.backoff[ledger] = (self.world.now_s + delay, delay)
        self._release(ledger, session, POLL_BUSY_S)

    def _release(self, ledger: int, session: int, next_poll_s: float) -> None:
        self.meta_call(lambda: self.rstore.release(claim_path(ledger), session),
                       lambda _: self.later(next_poll_s, self._poll, "poll"), f"release {ledger}")
