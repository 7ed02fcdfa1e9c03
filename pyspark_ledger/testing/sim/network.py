"""The simulated network between client actors and bookies.

Every message gets its own delay (so messages reorder), may be lost or duplicated while faults
are on, and never crosses a partition between a client actor and a bookie. Faults stop at the
heal: partitions are lifted and loss and duplication drop to zero, delays stay.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark_ledger.testing.sim.world import World

DELAY_MIN_S = 0.001
DELAY_JITTER_S = 0.004


class Network:
    def __init__(self, world: World, *, loss: float, duplication: float):
        self.world = world
        self.loss = loss
        self.duplication = duplication
        self.partitions: set[tuple[str, str]] = set()  # (client actor, bookie), either direction
        self.slow_s: dict[str, float] = {}  # extra delay of messages to and from a slow bookie

    def send(self, src: str, dst: str, deliver: Callable[[], None], label: str,
             schedule: Callable[[float, Callable[[], None], str], None] | None = None) -> None:
        """Deliver `deliver` at the destination after a delay, unless the message is lost.
        `schedule` is the destination's scheduler (a paused actor defers its deliveries)."""
        world = self.world
        if (src, dst) in self.partitions or (dst, src) in self.partitions:
            world.fault("partition_drop")
            return
        rng = world.rng
        if self.loss and rng.random() < self.loss:
            world.fault("loss", f"{src}->{dst} {label}")
            return
        copies = 2 if self.duplication and rng.random() < self.duplication else 1
        if copies == 2:
            world.fault("duplicate")
        at = schedule or world.at
        extra = self.slow_s.get(src, 0.0) + self.slow_s.get(dst, 0.0)
        for _ in range(copies):
            at(DELAY_MIN_S + rng.random() * DELAY_JITTER_S + extra, deliver, f"{src}->{dst} {label}")

    def partition(self, client: str, bookie: str) -> None:
        self.partitions.add((client, bookie))

    def heal_partition(self, client: str, bookie: str) -> None:
        self.partitions.discard((client, bookie))

    def heal(self) -> None:
        self.partitions.clear()
        self.slow_s.clear()
        self.loss = 0.0
        self.duplication = 0.0
