"""A seeded, deterministic simulator for the protocol room (docs/simulator.md).

One seed is one exact history: a simulated clock, an event queue, a network that delays, loses,
duplicates, reorders and partitions messages, bookies with journals that crash, fence, fill up
and corrupt copies, a versioned metadata store with sessions, and actors (log writers, a zombie
writer, concurrent recoverers, a tailing reader) that run the REAL pure core of
pyspark_ledger.protocol. A checker asserts the ledger invariants after every step.

    python -m pyspark_ledger.testing.sim --seeds 1000
"""

from pyspark_ledger.testing.sim.runner import SeedResult, run_seed

__all__ = ["SeedResult", "run_seed"]
