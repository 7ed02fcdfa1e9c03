"""Autorecovery in a history: which seeds run it, its actors, and its faults.

A seed runs autorecovery when its own draw says so (AUTORECOVERY_SHARE of the seeds); the draw
and the plan come from a Random of their own, so the histories of the other seeds are exactly
what they were before autorecovery joined the simulator (their regression seeds still replay).

Actors: AUDITOR_CANDIDATES auditors standing for election and 2..3 replication workers, all
stopping at `stop_s`. Faults, all before `faults_until_s` (later ones could leave nobody the time
to finish, which is no bug): a bookie lost (down past the grace period), for good or coming back
while its fragments are being copied; the leading auditor crashing (and mid-scan); workers
crashing after any step of a swap or at any time; a worker paused past its session (a zombie
that goes on with its swap while another worker took its claim).

The leader-change family (LEADER_CHANGE_SHARE of the autorecovery seeds, drawn from a Random of
its own): a bookie lost for good, the leading auditor crashing mid-scan often until
`faults_until_s` (so its successor resumes the scan's cursor), and at the first such crash, while
no auditor leads, the lost bookie back for a moment (writers may place it meanwhile) and lost
again: a loss during the leader change that the successor must not miss
(audit_scan.choose_scan, audited_by).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from pyspark_ledger.testing.sim.actor import Cluster
from pyspark_ledger.testing.sim.auditor import LOST_GRACE_S, SimAuditor
from pyspark_ledger.testing.sim.bookie import SimBookie
from pyspark_ledger.testing.sim.process import SESSION_TIMEOUT_S, Process
from pyspark_ledger.testing.sim.recovery_checker import RecoveryChecker
from pyspark_ledger.testing.sim.recovery_store import RecoveryStore
from pyspark_ledger.testing.sim.repl_worker import SimReplicationWorker

AUTORECOVERY_SHARE = 0.5
AUDITOR_CANDIDATES = 2
AUDITOR_CRASHES_MAX = 2
WORKER_CRASHES_MAX = 2
LEADER_CHANGE_SHARE = 0.3
LEADER_CHANGE_CRASH_MID_SCAN = 0.35  # chance per ledger scanned, in the family
BOUNCE_S = (0.2, 0.8)  # how long the first lost bookie is back during the leader change


# What autorecovery counts (faults and activity) starts with one of these (the CLI groups them).
COUNTER_PREFIXES = ("auditor", "audit_", "worker", "replacement_", "bookie_lost", "swap", "mark", "claim",
                    "autorecovery")


def is_autorecovery_counter(name: str) -> bool:
    return name.startswith(COUNTER_PREFIXES)


def autorecovery_rng(seed: int) -> random.Random:
    return random.Random(f"autorecovery {seed}")


def runs_autorecovery(seed: int) -> bool:
    return autorecovery_rng(seed).random() < AUTORECOVERY_SHARE


@dataclass
class AutorecoveryPlan:
    """What one seed's autorecovery looks like (drawn up front from the seed's own Random)."""

    lose_bookie: bool
    lost_at_s: float
    lost_returns_after_s: float | None  # None: lost for good
    workers: int
    step_crash: float
    auditor_crash_at_s: list[float] = field(default_factory=list)
    worker_crash_at_s: list[float] = field(default_factory=list)
    worker_pause_at_s: float | None = None
    leader_change_mid_scan: bool = False  # the leader-change family (module docstring)


def draw_plan(seed: int, heal_s: float, faults_until_s: float) -> AutorecoveryPlan:
    rng = autorecovery_rng(seed)
    rng.random()  # the share draw (runs_autorecovery)
    lose = rng.random() < 0.7
    plan = AutorecoveryPlan(
        lose_bookie=lose, lost_at_s=rng.uniform(0.2, heal_s * 0.85),
        lost_returns_after_s=None if rng.random() < 0.6 else LOST_GRACE_S + rng.uniform(0.3, 4.0),
        workers=rng.choice((2, 2, 3)), step_crash=rng.choice((0.0, 0.1, 0.25, 0.4)))
    plan.auditor_crash_at_s = [rng.uniform(0.5, faults_until_s) for _ in range(rng.randint(0, AUDITOR_CRASHES_MAX))]
    plan.worker_crash_at_s = [rng.uniform(0.5, faults_until_s) for _ in range(rng.randint(0, WORKER_CRASHES_MAX))]
    if rng.random() < 0.5:
        plan.worker_pause_at_s = rng.uniform(1.0, faults_until_s)
    if random.Random(f"leader change mid-scan {seed}").random() < LEADER_CHANGE_SHARE:
        plan.leader_change_mid_scan, plan.lose_bookie, plan.lost_returns_after_s = True, True, None
    return plan


class Autorecovery:
    def __init__(self, cluster: Cluster, plan: AutorecoveryPlan, *, stop_s: float, faults_until_s: float):
        self.cluster, self.plan = cluster, plan
        self.world = cluster.world
        self.rstore = RecoveryStore(cluster.store)
        self.checker = RecoveryChecker(cluster.checker, cluster.store, self.rstore, cluster.bookies)
        cluster.checker_recovery = self.checker
        self.faults_until_s = faults_until_s
        self.lost_for_good = cluster.held_down  # lost and not back (yet): the heal leaves them down
        mid_scan = LEADER_CHANGE_CRASH_MID_SCAN if plan.leader_change_mid_scan else (
            0.1 if plan.auditor_crash_at_s else 0.0)
        self.auditors = [SimAuditor(cluster, self.rstore, f"auditor{i}", stop_s, faults_until_s,
                                    crash_mid_scan=mid_scan, on_crash_mid_scan=self._during_the_leader_change,
                                    crash_mid_scan_until_s=faults_until_s if plan.leader_change_mid_scan else stop_s)
                         for i in range(AUDITOR_CANDIDATES)]
        self._leader_changed = False
        self.workers = [SimReplicationWorker(cluster, self.rstore, f"worker{i}", stop_s, step_crash=plan.step_crash,
                                             crashes_until_s=faults_until_s) for i in range(plan.workers)]

    def start(self) -> None:
        world, plan = self.world, self.plan
        world.stats["autorecovery_histories"] += 1
        for actor in [*self.auditors, *self.workers]:
            actor.start()
        if plan.lose_bookie:
            world.at(plan.lost_at_s, self._lose_a_bookie, "fault lose a bookie")
        for at_s in plan.auditor_crash_at_s:
            world.at(at_s, self._crash_the_leader, "fault auditor crash")
        for at_s in plan.worker_crash_at_s:
            world.at(at_s, lambda: self._crash(world.rng.choice(self.workers), "worker_crash_anytime"),
                     "fault worker crash")
        if plan.worker_pause_at_s is not None:
            world.at(plan.worker_pause_at_s, self._pause_a_worker, "fault worker pause")

    def _lose_a_bookie(self) -> None:
        up = [b for b in self.cluster.bookie_ids if self.cluster.bookies[b].up]
        if not up:
            return
        b = self.world.rng.choice(up)
        bookie = self.cluster.bookies[b]
        returns = self.plan.lost_returns_after_s
        self.world.fault("bookie_lost_for_good" if returns is None else "bookie_lost_then_back", b)
        bookie.crash()
        self.lost_for_good.add(b)
        if returns is not None:
            def back() -> None:
                self.lost_for_good.discard(b)
                bookie.restart()
            self.world.at(returns, back, f"lost bookie {b} comes back")

    def _during_the_leader_change(self) -> None:
        """The family's faults, at its first mid-scan crash (module docstring)."""
        if not self.plan.leader_change_mid_scan or self._leader_changed or self.world.now_s >= self.faults_until_s:
            return
        self._leader_changed = True
        for b in sorted(b for b in self.lost_for_good if not self.cluster.bookies[b].up)[:1]:
            self.world.fault("leader_change_bounce", b)
            bookie = self.cluster.bookies[b]
            bookie.restart()

            def again(bookie: SimBookie = bookie) -> None:
                if bookie.up:
                    bookie.crash()
            self.world.at(self.world.rng.uniform(*BOUNCE_S), again, f"lost bookie {b} goes again")

    def _crash_the_leader(self) -> None:
        leaders = [a for a in self.auditors if a.leading and a.running]
        if leaders:
            self._crash(leaders[0], "auditor_crash")

    def _crash(self, process: Process, kind: str) -> None:
        if process.running:
            self.world.fault(kind, process.name)
            process.crash(kind, self.world.rng.uniform(0.3, 2.0))

    def _pause_a_worker(self) -> None:
        """A worker stops (GC, VM freeze) past its session: its claim goes to another worker,
        and it goes on with its swap when it runs again."""
        worker = self.world.rng.choice(self.workers)
        if not worker.running or worker.paused_until_s > self.world.now_s:
            return
        self.world.fault("worker_pause", worker.name)
        worker.paused_until_s = self.world.now_s + SESSION_TIMEOUT_S + self.world.rng.uniform(0.3, 2.0)
        session = worker.session
        self.world.at(SESSION_TIMEOUT_S, lambda: self.cluster.store.expire(session), f"{worker.name}'s session expires")

    def at_end(self) -> None:
        self.checker.at_end(self.lost_for_good)
