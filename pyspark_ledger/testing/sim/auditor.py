"""The elected auditor (autorecovery/elected_auditor.py), as a simulated process.

Candidates stand for election by taking the auditor lock (an ephemeral of their session); the
leader ticks: observes the registrations (a bookie that is up is registered) with the product's
pure bookie_states.observe, keeps the states in the store (a new leader keeps its predecessor's
down-since), and once a bookie has been down for the grace period (bookie_states.lost) and no
scan covered that loss yet, scans every ledger and marks those with a fragment on it. The scan
writes its cursor every CURSOR_EVERY_LEDGERS ledgers; a leader that crashes mid-scan leaves it
to its successor, which resumes it first (marks are idempotent). Which scan runs, and which
bookies a finished scan counts as audited, are the product's audit_scan.choose_scan and
audited_by. The leader checks it still holds the lock at every tick and ledger.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

from metadata import LedgerId
from pyspark_ledger.autorecovery.audit_scan import ScanChoice, ScanCursor, audited_by, choose_scan
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
CURSOR_EVERY_LEDGERS = 2  # the product's is 100; a history has tens of ledgers


def cursor_ledger(after: LedgerId | None) -> int:
    """The simulator's ledgers are ints: scope 0 ids in the cursor."""
    return -1 if after is None else after.id


def now_ms(cluster: Cluster) -> int:
    return int(round(cluster.world.now_s * 1000))


class SimAuditor(Process):
    def __init__(self, cluster: Cluster, rstore: RecoveryStore, name: str, stop_s: float, quiet_after_s: float,
                 grace_s: float = LOST_GRACE_S, crash_mid_scan: float = 0.0,
                 on_crash_mid_scan: Callable[[], None] = lambda: None, crash_mid_scan_until_s: float | None = None):
        super().__init__(cluster, name)
        self.rstore = rstore
        self.stop_s = stop_s
        self.quiet_after_s = quiet_after_s
        self.grace_ms = int(grace_s * 1000)
        self.crash_mid_scan = crash_mid_scan  # chance of crashing after each ledger scanned
        self.on_crash_mid_scan = on_crash_mid_scan  # a family's faults while no auditor leads
        self.crash_mid_scan_until_s = stop_s if crash_mid_scan_until_s is None else crash_mid_scan_until_s
        self.leading = False
        self.states: dict[str, BookieState] | None = None  # the leader's; None: load them (just elected)
        self.left_over: ScanCursor | None = None  # a predecessor's cursor, read once when elected
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
            if self.states is None:
                self.left_over = self.rstore.scan_cursor
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
            lost_now = lost(states, now_ms(self.cluster), self.grace_ms)
            choice = choose_scan(self.left_over, lost_now, {b for b in lost_now if states[b].audited})
            if lost_now:
                self.left_over = None  # the product reads it once, and uses it at the first loss
            if choice is not None:
                self.world.stats["audit_scans_resumed" if choice.resumed else "audit_scans"] += 1
                self.world.note(f"{self.name} lost bookies {list(choice.cursor.bookies)}: scanning"
                                f"{' from the cursor ' + str(cursor_ledger(choice.cursor.after)) if choice.resumed else ''}")
                after = cursor_ledger(choice.cursor.after)
                self._scan(choice, [lid for lid in sorted(self.cluster.store.ledgers) if lid > after], 0)
            else:
                self.later(self._interval(TICK_S), self._tick, "tick")

        self.meta_call(op, then, "observe bookies")

    def _scan(self, choice: ScanChoice, ledgers: Sequence[int], i: int) -> None:
        """Mark ledgers[i:] that name a bookie of the choice's, one ledger per metadata operation;
        the cursor is written when the scan starts and after every CURSOR_EVERY_LEDGERS ledgers."""
        if i >= len(ledgers):
            self._scan_done(choice)
            return
        session, ledger, lost_set = self.session, ledgers[i], frozenset(choice.cursor.bookies)

        def op() -> object:
            if not self.rstore.holds(AUDITOR_LOCK, session):
                return None
            if i == 0:
                self.rstore.scan_cursor = choice.cursor
            meta, _ = self.cluster.store.read(ledger)
            named = lost_set & {b for f in meta.fragments for b in f.ensemble}
            if named and self.rstore.mark(ledger, frozenset(named)):
                self.world.stats["marks_written"] += 1
                self.world.note(f"{self.name} marks ledger {ledger} under-replicated: {sorted(named)}")
            if (i + 1) % CURSOR_EVERY_LEDGERS == 0:
                self.rstore.scan_cursor = ScanCursor(choice.cursor.bookies, LedgerId(0, ledger))
            return True

        def then(result: object) -> None:
            if result is None:
                self._step_down("lost the auditor lock mid-scan")
            elif (self.crash_mid_scan and self.world.now_s < self.crash_mid_scan_until_s
                  and self.world.rng.random() < self.crash_mid_scan):
                self.world.fault("auditor_crash_mid_scan", self.name)
                self.crash("mid-scan", self.world.rng.uniform(0.3, 2.0))
                self.on_crash_mid_scan()
            else:
                self._scan(choice, ledgers, i + 1)

        self.meta_call(op, then, f"scan ledger {ledger}")

    def _scan_done(self, choice: ScanChoice) -> None:
        session = self.session
        todo = audited_by(choice)

        def op() -> object:
            if not self.rstore.holds(AUDITOR_LOCK, session):
                return None
            self.rstore.scan_cursor = None
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
