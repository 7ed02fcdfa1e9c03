"""The elected auditor (autorecovery/elected_auditor.py), as a simulated process.

Candidates stand for election by taking the auditor lock (an ephemeral of their session); the
leader ticks: observes the registrations (a bookie that is up is registered) with the product's
pure bookie_states.observe, keeps the states in the store (a new leader keeps its predecessor's
down-since), and once a bookie has been down for the grace period (bookie_states.lost) and no
scan covered that loss yet, scans every ledger and marks those with a fragment on it. A scan
that ends marks the loss audited; a leader that crashes mid-scan leaves it to its successor
(marks are idempotent). The leader checks it still holds the lock at every tick and ledger.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from pyspark_ledger.autorecovery.bookie_states import BookieState, forget_audits, lost, observe, with_audited
from pyspark_ledger.testing.sim.actor import Cluster
from pyspark_ledger.testing.sim.process import Process
from pyspark_ledger.testing.sim.recovery_store import RecoveryStore

AUDITOR_LOCK = "/autorecovery/auditor"
ELECTION_RETRY_S = 1.0
TICK_S = 0.5
# Once no fault can change a bookie any more (`quiet_after_s`), ticks and election retries slow
# to this: the same decisions, for a fraction of the simulated events (the per-seed cost).
QUIET_INTERVAL_S = 2.0
LOST_GRACE_S = 0.8  # a bookie down this long is lost (crash faults last 0.1..1.5 s: some are)


def now_ms(cluster: Cluster) -> int:
    return int(round(cluster.world.now_s * 1000))


class SimAuditor(Process):
    def __init__(self, cluster: Cluster, rstore: RecoveryStore, name: str, stop_s: float, quiet_after_s: float,
                 grace_s: float = LOST_GRACE_S, crash_mid_scan: float = 0.0):
        super().__init__(cluster, name)
        self.rstore = rstore
        self.stop_s = stop_s
        self.quiet_after_s = quiet_after_s
        self.grace_ms = int(grace_s * 1000)
        self.crash_mid_scan = crash_mid_scan  # chance of crashing after each ledger scanned
        self.leading = False
        self.states: dict[str, BookieState] | None = None  # the leader's; None: load them (just elected)
        # What a registration watch reports a change of: each bookie's (up, incarnation).
        self.registrations_seen: tuple[tuple[str, bool, int], ...] | None = None

    def start(self) -> None:
        self.later(0.0, self._stand, "stands for election")

    def on_restart(self) -> None:
        self.leading = False
        self._stand()

    def _interval(self, normal_s: float) -> float:
        return normal_s if self.world.now_s < self.quiet_after_s else QUIET_INTERVAL_S

    def _stand(self) -> None:
        if self.world.now_s >= self.stop_s:
            return
        self.renew_session_if_expired()
        session = self.session

        def then(elected: object) -> None:
            if elected is True:
                self.leading = True
                self.states, self.registrations_seen = None, None
                self.world.stats["auditor_elections"] += 1
                self.world.note(f"{self.name} elected auditor")
                self._tick()
            else:
                self.later(self._interval(ELECTION_RETRY_S), self._stand, "stands again")

        self.meta_call(lambda: self.rstore.try_lock(AUDITOR_LOCK, session), then, "auditor election")

    def _step_down(self, why: str) -> None:
        self.world.note(f"{self.name} stops leading: {why}")
        self.leading = False
        self.later(self._interval(ELECTION_RETRY_S), self._stand, "stands again")

    def _tick(self) -> None:
        if self.world.now_s >= self.stop_s:
            session = self.session
            self.meta_call(lambda: self.rstore.release(AUDITOR_LOCK, session), lambda _: None, "auditor resigns")
            self.leading = False
            return
        session = self.session

        def op() -> object:
            """The product's _lead/_observe: a new leader loads the states and forgets their
            audits; a watch event (a registration came or went since the last listing) too."""
            if not self.rstore.holds(AUDITOR_LOCK, session):
                return None
            bookies, ids = self.cluster.bookies, self.cluster.bookie_ids
            registered = {b: bookies[b].readonly for b in ids if bookies[b].up}
            previous = forget_audits(self.rstore.bookie_states) if self.states is None else self.states
            states = observe(previous, registered, set(ids), now_ms(self.cluster))
            self.rstore.bookie_states = states
            seen = tuple((b, bookies[b].up, bookies[b].incarnation) for b in ids)
            if self.registrations_seen is not None and seen != self.registrations_seen:
                states = forget_audits(states)
            return states, seen

        def then(result: object) -> None:
            if result is None:
                self._step_down("lost the auditor lock")
                return
            states, self.registrations_seen = cast(tuple[dict[str, BookieState], tuple[tuple[str, bool, int], ...]],
                                                   result)
            self.states = states
            todo = sorted(b for b in lost(states, now_ms(self.cluster), self.grace_ms) if not states[b].audited)
            if todo:
                self.world.stats["audit_scans"] += 1
                self.world.note(f"{self.name} lost bookies {todo}: scanning")
                self._scan(todo, sorted(self.cluster.store.ledgers), 0)
            else:
                self.later(self._interval(TICK_S), self._tick, "tick")

        self.meta_call(op, then, "observe bookies")

    def _scan(self, todo: Sequence[str], ledgers: Sequence[int], i: int) -> None:
        """Mark ledgers[i:] that name a bookie of `todo`, one ledger per metadata operation."""
        if i >= len(ledgers):
            self._scan_done(todo)
            return
        session, ledger, lost_set = self.session, ledgers[i], frozenset(todo)

        def op() -> object:
            if not self.rstore.holds(AUDITOR_LOCK, session):
                return None
            meta, _ = self.cluster.store.read(ledger)
            named = lost_set & {b for f in meta.fragments for b in f.ensemble}
            if named and self.rstore.mark(ledger, frozenset(named)):
                self.world.stats["marks_written"] += 1
                self.world.note(f"{self.name} marks ledger {ledger} under-replicated: {sorted(named)}")
            return True

        def then(result: object) -> None:
            if result is None:
                self._step_down("lost the auditor lock mid-scan")
            elif self.crash_mid_scan and self.world.now_s < self.stop_s and self.world.rng.random() < self.crash_mid_scan:
                self.world.fault("auditor_crash_mid_scan", self.name)
                self.crash("mid-scan", self.world.rng.uniform(0.3, 2.0))
            else:
                self._scan(todo, ledgers, i + 1)

        self.meta_call(op, then, f"scan ledger {ledger}")

    def _scan_done(self, todo: Sequence[str]) -> None:
        session = self.session

        def op() -> object:
            if not self.rstore.holds(AUDITOR_LOCK, session):
                return None
            states = dict(self.rstore.bookie_states)
            for b in todo:
                if b in states and states[b].state == "down":
                    states[b] = with_audited(states[b])
            self.rstore.bookie_states = states
            return True

        def then(result: object) -> None:
            if result is None:
                self._step_down("lost the auditor lock before the scan was recorded")
                return
            if self.states is not None:
                self.states = {b: with_audited(s) if b in todo and s.state == "down" else s
                               for b, s in self.states.items()}
            self.later(self._interval(TICK_S), self._tick, "tick")

        self.meta_call(op, then, "scan done")
