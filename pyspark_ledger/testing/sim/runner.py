"""One seed, one history: draw the configuration, build the world, run it, check it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from pyspark_ledger.protocol.invariants import InvariantError
from pyspark_ledger.testing.sim.actor import Cluster
from pyspark_ledger.testing.sim.autorecovery import Autorecovery, draw_plan, runs_autorecovery
from pyspark_ledger.testing.sim.bookie import SimBookie
from pyspark_ledger.testing.sim.checker import Checker
from pyspark_ledger.testing.sim.faults import FAULT_KINDS, schedule_faults
from pyspark_ledger.testing.sim.logwriter import SimLogWriter
from pyspark_ledger.testing.sim.metastore import MetaStore
from pyspark_ledger.testing.sim.network import Network
from pyspark_ledger.testing.sim.racks import SimPlacement, draw_racks, places_by_rack
from pyspark_ledger.testing.sim.recoverer import SimRecovery
from pyspark_ledger.testing.sim.runs import uses_runs
from pyspark_ledger.testing.sim.tailer import SimTailer
from pyspark_ledger.testing.sim.world import Violation, World

QUORUMS = ((3, 3, 2), (3, 2, 2), (4, 3, 2), (4, 2, 2), (5, 3, 2), (3, 3, 3), (4, 3, 3))
HEAL_S = 3.0
SWEEP_AFTER_HEAL_S = 8.0  # leftover ledgers are recovered this long after the heal
END_AFTER_HEAL_S = 25.0  # every operation must have ended by then (liveness bound)
READ_ENTRIES_MAX = 4
READ_BYTES_MAX = 4000  # entries are 600..3000 bytes: many answers come back short
AUTORECOVERY_FAULTS_UNTIL_S = HEAL_S + 10.0  # crashes of auditors and workers, pauses
AUTORECOVERY_STOP_S = HEAL_S + END_AFTER_HEAL_S - 4.0  # auditors and workers stop (marks must be gone)


@dataclass
class SeedResult:
    seed: int
    violation: str | None
    faults: Counter[str] = field(default_factory=Counter)
    stats: Counter[str] = field(default_factory=Counter)
    events: int = 0
    trace_hash: int = 0
    trace_tail: Sequence[str] = ()
    trace_all: Sequence[str] | None = None
    checks: int = 0
    entries_acked: int = 0


def run_seed(seed: int, *, trace: bool = False, autorecovery: bool | None = None,
             racks: bool | None = None, runs: bool | None = None) -> SeedResult:
    """autorecovery: None runs it when the seed's own draw says so (autorecovery.py); False
    replays the seed's history as it was before autorecovery joined the simulator. racks: the
    same for rack-aware placement (racks.py); runs: for run-encoded adds (runs.py)."""
    world = World(seed, trace_all=trace)
    world.autorecovery = runs_autorecovery(seed) if autorecovery is None else autorecovery
    world.racks = places_by_rack(seed) if racks is None else racks
    world.runs = uses_runs(seed) if runs is None else runs
    rng = world.rng
    violation: str | None = None
    checker: Checker | None = None
    try:
        cluster = _build(world)
        checker = cluster.checker
        recovery_actors = _autorecovery(cluster)
        live_ledgers = _populate(cluster, recovery_actors)
        drained = world.run_until(HEAL_S + END_AFTER_HEAL_S)
        checker.at_end(drained, live_ledgers())
        if recovery_actors is not None:
            recovery_actors.at_end()
    except (Violation, InvariantError) as exc:
        violation = f"{type(exc).__name__}: {exc}"
        world.note(f"VIOLATION {violation}")
    del rng
    return SeedResult(seed, violation, world.faults, world.stats, world.events, world.trace_hash, list(world.trace_tail),
                      world.trace_all, checker.checks if checker else 0,
                      sum(v + 1 for v in checker.acked.values()) if checker else 0)


def _build(world: World) -> Cluster:
    rng = world.rng
    quorum = rng.choice(QUORUMS)
    # Autorecovery seeds get one bookie more: a lost bookie leaves a replacement for every slot.
    bookies_n = quorum[0] + rng.randint(1, 2) + (1 if world.autorecovery else 0)
    ids = [f"b{i}" for i in range(bookies_n)]
    bookies = {b: SimBookie(world, b) for b in ids}
    lossy = rng.random() < 0.7
    net = Network(world, loss=rng.uniform(0.0, 0.08) if lossy else 0.0,
                  duplication=rng.uniform(0.0, 0.05) if lossy else 0.0)
    store = MetaStore()
    checker = Checker(world, store, bookies)
    cluster = Cluster(world, net, bookies, store, checker, read_bytes_max=READ_BYTES_MAX,
                      read_entries_max=READ_ENTRIES_MAX)
    cluster.quorum = quorum
    if world.racks:
        cluster.placement = SimPlacement(draw_racks(world.seed, ids), rng, checker)
        world.note(f"racks {cluster.placement.racks}")
    world.note(f"seed {world.seed}: bookies={ids} E,W,A={quorum} loss={net.loss:.3f} dup={net.duplication:.3f}")
    return cluster


def _autorecovery(cluster: Cluster) -> Autorecovery | None:
    seed = cluster.world.seed
    if not cluster.world.autorecovery:
        return None
    plan = draw_plan(seed, HEAL_S, AUTORECOVERY_FAULTS_UNTIL_S)
    cluster.world.note(f"autorecovery: {plan}")
    return Autorecovery(cluster, plan, stop_s=AUTORECOVERY_STOP_S, faults_until_s=AUTORECOVERY_FAULTS_UNTIL_S)


def _populate(cluster: Cluster, autorecovery: Autorecovery | None) -> Callable[[], list[int]]:
    """Start the actors and schedule the faults; returns 'ledgers with a live writer now'."""
    world, rng = cluster.world, cluster.world.rng
    quorum = cluster.quorum
    ended: list[str] = []

    def log_end(w: SimLogWriter, error: str | None) -> None:
        ended.append(w.name)

    primary = SimLogWriter(cluster, "primary", ledgers_total=2, entries_per_ledger=rng.randint(5, 14),
                           quorum=quorum, attempts_max=30, retry_s=0.3, give_up_at_s=HEAL_S + 6.0,
                           on_end=log_end)
    primary.start()
    standby = SimLogWriter(cluster, "standby", ledgers_total=1, entries_per_ledger=rng.randint(2, 6),
                           quorum=quorum, attempts_max=int((HEAL_S + 6.0) / 0.3), retry_s=0.3,
                           give_up_at_s=HEAL_S + 6.0, on_end=log_end)
    standby.later(0.1, standby.start, "start")
    tailer = SimTailer(cluster, "tailer", stop_s=HEAL_S + 6.0)
    tailer.start()
    clients = ["primary", "standby", "tailer"]
    for i in range(rng.choice((0, 0, 1, 2))):
        name = f"recoverer{i}"
        clients.append(name)
        world.at(rng.uniform(0.1, HEAL_S), partial(_recover_with_retries, cluster, name, None, 5, 0.5),
                 f"{name} starts")
    kinds: tuple[str, ...] = FAULT_KINDS
    if autorecovery is not None:
        autorecovery.start()
        if autorecovery.plan.lose_bookie:
            # A lost bookie's copies are out of reach: a corrupted copy elsewhere could be the
            # last intact one of an entry (two faults past what A >= 2 copies tolerate).
            kinds = tuple(k for k in FAULT_KINDS if k != "corrupt")
    schedule_faults(cluster, rng.randint(0, 8), HEAL_S, primary, clients, kinds)
    world.at(HEAL_S + SWEEP_AFTER_HEAL_S, lambda: _sweep(cluster), "sweep")

    def live_ledgers() -> list[int]:
        return sorted(w.ledger for w in cluster.writers if w.live)

    return live_ledgers


def _recover_with_retries(cluster: Cluster, name: str, ledger: int | None, attempts: int, retry_s: float) -> None:
    """A client opening a ledger with recovery (the log's last one if `ledger` is None); a
    failed recovery is tried again, a bounded number of times."""
    if ledger is None:
        record, _ = cluster.store.log
        if not record.ledgers:
            return
        ledger = record.ledgers[-1]

    def ended(rec: SimRecovery, error: str | None) -> None:
        if error is not None and attempts > 1:
            cluster.world.at(retry_s, lambda: _recover_with_retries(cluster, name, ledger, attempts - 1, retry_s),
                             f"{name} retries {ledger}")

    SimRecovery(cluster, f"{name}.{ledger}", ledger, ended).start()


def _sweep(cluster: Cluster) -> None:
    """After the heal: a ledger left OPEN or IN_RECOVERY without a live writer is recovered."""
    live = {w.ledger for w in cluster.writers if w.live}
    for ledger in sorted(cluster.store.ledgers):
        meta, _ = cluster.store.read(ledger)
        if meta.state != "CLOSED" and ledger not in live:
            _recover_with_retries(cluster, "sweeper", ledger, 6, 1.0)
