"""The fault schedule of one seed: drawn from its Random, all before the heal.

Kinds: bookie crash (restart later), partition between a client actor and a bookie, disk full
(read-only), fsync failure, a corrupted durable copy, a slow bookie, a metadata version bump
(another client's write: the next CAS conflicts), the primary writer's session expiring, and a
pause of the primary writer past every timeout with its session expiring meanwhile (a zombie).
Network loss and duplication are per message (network.py). At the heal every fault is lifted.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from pyspark_ledger.testing.sim.actor import Cluster
from pyspark_ledger.testing.sim.logwriter import SimLogWriter

FAULT_KINDS = ("crash", "partition", "read_only", "fsync_failure", "corrupt", "slow", "meta_conflict",
               "session_expiry", "zombie_pause")


def schedule_faults(cluster: Cluster, count: int, heal_s: float, primary: SimLogWriter,
                    clients: Sequence[str], kinds: Sequence[str]) -> None:
    world = cluster.world
    rng = world.rng
    for _ in range(count):
        kind = rng.choice(list(kinds))
        at_s = rng.uniform(0.05, heal_s * 0.9)
        duration_s = rng.uniform(0.1, heal_s * 0.5)
        bookie_id = rng.choice(list(cluster.bookie_ids))
        client = rng.choice(list(clients))
        world.at(at_s, functools.partial(_inject, cluster, kind, bookie_id, client, duration_s, primary),
                 f"fault {kind}")
    world.at(heal_s, lambda: heal(cluster), "HEAL")


def _inject(cluster: Cluster, kind: str, b: str, client: str, duration_s: float, primary: SimLogWriter) -> None:
    world, bookie, store = cluster.world, cluster.bookies[b], cluster.store
    if kind == "crash":
        if bookie.up:
            world.fault(kind, b)
            bookie.crash()
            # A bookie lost for good meanwhile stays down (autorecovery.py's leader-change family
            # brings a lost bookie back for a moment, and a crash then must not revive it for good).
            world.at(duration_s, lambda: None if b in cluster.held_down else bookie.restart(), f"{b} restarts")
    elif kind == "partition":
        world.fault(kind, f"{client} | {b}")
        cluster.net.partition(client, b)
        world.at(duration_s, lambda: cluster.net.heal_partition(client, b), f"partition {client}|{b} heals")
    elif kind == "read_only":
        world.fault(kind, b)
        bookie.readonly = True
        world.at(duration_s, lambda: setattr(bookie, "readonly", False), f"{b} writable again")
    elif kind == "fsync_failure":
        world.fault(kind, b)
        bookie.fsync_failing = True
        world.at(duration_s, lambda: setattr(bookie, "fsync_failing", False), f"{b} fsync works again")
    elif kind == "corrupt":
        _corrupt_one(cluster, b)
    elif kind == "slow":
        world.fault(kind, b)
        cluster.net.slow_s[b] = world.rng.uniform(0.02, 0.2)
        world.at(duration_s, functools.partial(_fast_again, cluster, b), f"{b} fast again")
    elif kind == "meta_conflict":
        record, _ = store.log
        if record.ledgers:
            world.fault(kind, f"ledger {record.ledgers[-1]}")
            store.bump(record.ledgers[-1])
    elif kind == "session_expiry":
        world.fault(kind, primary.name)
        store.expire(primary.session)
        primary.later(0.01, primary.session_expired, "session expired")
    elif kind == "zombie_pause" and primary.paused_until_s <= world.now_s:
        world.fault(kind, primary.name)
        primary.pause(world.now_s + duration_s + 1.0)  # past every add, fence and read timeout
        world.at(0.3, lambda: store.expire(primary.session), f"{primary.name}'s session expires")


def _corrupt_one(cluster: Cluster, b: str) -> None:
    """Flip a durable copy on `b`, only where no other copy of that entry is corrupt (one intact
    copy of an acknowledged entry always remains: A >= 2)."""
    world = cluster.world
    lc_items = sorted(cluster.bookies[b].ledgers.items())
    candidates = [(lid, eid) for lid, lc in lc_items for eid in sorted(lc.synced) if eid not in lc.corrupt]
    candidates = [(lid, eid) for lid, eid in candidates
                  if not any(eid in other.ledgers[lid].corrupt for other in cluster.bookies.values()
                             if lid in other.ledgers)]
    if candidates:
        lid, eid = world.rng.choice(candidates)
        world.fault("corrupt", f"{b} {lid}/{eid}")
        cluster.bookies[b].ledgers[lid].corrupt.add(eid)


def heal(cluster: Cluster) -> None:
    cluster.net.heal()
    for b in cluster.bookie_ids:
        bookie = cluster.bookies[b]
        if not bookie.up and b not in cluster.held_down:
            bookie.restart()
        bookie.readonly = False
        bookie.fsync_failing = False


def _fast_again(cluster: Cluster, bookie_id: str) -> None:
    cluster.net.slow_s.pop(bookie_id, None)
