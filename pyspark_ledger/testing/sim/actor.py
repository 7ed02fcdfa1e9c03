"""What every client actor shares: a name, a pause (a stopped process), bookie RPCs through the
network with a timeout, and metadata calls with a latency."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pyspark_ledger.testing.sim.bookie import SimBookie
from pyspark_ledger.testing.sim.checker import Checker
from pyspark_ledger.testing.sim.metastore import MetaStore
from pyspark_ledger.testing.sim.network import Network
from pyspark_ledger.testing.sim.world import World

META_DELAY_S = 0.002


class Cluster:
    """The shared world an actor lives in."""

    def __init__(self, world: World, net: Network, bookies: Mapping[str, SimBookie], store: MetaStore,
                 checker: Checker, *, read_bytes_max: int, read_entries_max: int):
        self.world, self.net, self.bookies, self.store, self.checker = world, net, bookies, store, checker
        self.bookie_ids = tuple(sorted(bookies))
        self.read_bytes_max = read_bytes_max
        self.read_entries_max = read_entries_max
        self.recovering: dict[int, list[str]] = {}  # ledger -> recoveries running now
        self.writers: list[Any] = []  # every ledger writer started (the checker asks which are live)
        self.quorum: tuple[int, int, int] = (0, 0, 0)  # (E, W, A) the seed drew (runner.py)
        self.held_down: set[str] = set()  # lost bookies the heal does not bring back (autorecovery.py)
        self.checker_recovery: Any = None  # autorecovery's invariants (recovery_checker.py), when it runs
        self.placement: Any = None  # racks.SimPlacement in the seeds that place by rack, else random picks

    def writable_bookies(self) -> list[str]:
        """What the registry would list as writable (up and not read-only)."""
        return [b for b in self.bookie_ids if self.bookies[b].up and not self.bookies[b].readonly]


class Actor:
    def __init__(self, cluster: Cluster, name: str):
        self.cluster = cluster
        self.world = cluster.world
        self.name = name
        self.paused_until_s = 0.0
        self._next_rid = 0
        self._outstanding: set[int] = set()

    def later(self, delay_s: float, fn: Callable[[], None], label: str) -> None:
        self.world.at_actor(self, delay_s, fn, f"{self.name} {label}")

    def call_bookie(self, bookie_id: str, request: Callable[[SimBookie, Callable[[Any], None]], None],
                    on_reply: Callable[[Any], None], on_timeout: Callable[[], None], timeout_s: float,
                    label: str) -> None:
        """Send `request` to a bookie; exactly one of on_reply / on_timeout runs (late and
        duplicated replies are dropped)."""
        self._next_rid += 1
        rid = self._next_rid
        self._outstanding.add(rid)
        net, bookie = self.cluster.net, self.cluster.bookies[bookie_id]

        def reply(result: Any) -> None:
            if rid in self._outstanding:
                self._outstanding.discard(rid)
                on_reply(result)

        def respond(result: Any) -> None:
            net.send(bookie_id, self.name, lambda: reply(result), f"reply {label}",
                     schedule=lambda d, fn, lb: self.world.at_actor(self, d, fn, lb))

        def timeout() -> None:
            if rid in self._outstanding:
                self._outstanding.discard(rid)
                on_timeout()

        net.send(self.name, bookie_id, lambda: request(bookie, respond), label)
        self.later(timeout_s, timeout, f"timeout {label} {bookie_id}")

    def meta_call(self, op: Callable[[], Any], then: Callable[[Any], None], label: str) -> None:
        """Run `op` on the store after a latency, then `then(result or exception)` after another.
        Only a stale version (BadVersion) or a broken invariant comes back as an exception."""

        def run() -> None:
            try:
                result = op()
            except Exception as exc:
                if type(exc).__name__ == "Violation":
                    raise
                result = exc
            self.later(META_DELAY_S, lambda: then(result), f"meta reply {label}")

        self.world.at(META_DELAY_S, run, f"{self.name} meta {label}")
