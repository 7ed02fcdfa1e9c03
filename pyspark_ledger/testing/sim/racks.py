"""Racks in the simulator (issue 29 item 3): part of the seeds give their bookies racks and
place with the product's own RackAwarePlacement (protocol/placement.py), driven by the seed's
Random: new ensembles (log writers), a writer's replacements in ensemble changes, and the
replacement of a lost bookie by a replica swap (autorecovery). Recoveries keep their own pick.

Whether a seed uses racks, and which, is drawn from a Random of its own (as autorecovery's
share is), so seeds without racks replay the histories they always had. A checker rule: a new
ensemble with one write set (E = W) spans as many racks as there are writable racks, up to W.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from pyspark_ledger.errors import NotEnoughBookiesError
from pyspark_ledger.protocol.placement import RackAwarePlacement, rack_spread
from pyspark_ledger.testing.sim.checker import Checker

RACKS_SHARE = 0.5  # of the seeds place by rack


def racks_rng(seed: int) -> random.Random:
    return random.Random(f"racks {seed}")


def places_by_rack(seed: int) -> bool:
    return racks_rng(seed).random() < RACKS_SHARE


def draw_racks(seed: int, bookie_ids: Sequence[str]) -> dict[str, str]:
    """Two or three racks, bookies dealt round-robin from a shuffled order; zones half the time."""
    rng = racks_rng(seed)
    rng.random()  # the draw places_by_rack made
    racks_n = rng.choice((2, 3, 3))
    zoned = rng.random() < 0.5
    order = list(bookie_ids)
    rng.shuffle(order)
    return {b: (f"z{(i % racks_n) % 2}/r{i % racks_n}" if zoned else f"r{i % racks_n}") for i, b in enumerate(order)}


class SimPlacement:
    """The product policy over the simulated registry (best effort: the rule is not enforced)."""

    def __init__(self, racks: dict[str, str], rng: random.Random, checker: Checker):
        self.racks = racks
        self.policy = RackAwarePlacement(lambda: self.racks, rng=rng)
        self.checker = checker

    def new_ensemble(self, ensemble_size: int, write_quorum_size: int, writable: Sequence[str]) -> tuple[str, ...]:
        ensemble = tuple(self.policy.new_ensemble(ensemble_size, writable, write_quorum_size=write_quorum_size))
        self.checker.world.stats["rack_placements"] += 1
        if ensemble_size == write_quorum_size:
            best = min(write_quorum_size, len({self.racks[b] for b in writable}))
            spread = rack_spread([self.racks[b] for b in ensemble], write_quorum_size)
            if spread < best:
                self.checker.fail(f"new ensemble {list(ensemble)} spans {spread} racks, {best} were writable")
        return ensemble

    def replacement(self, ensemble: Sequence[str], candidates: Sequence[str], failed: str,
                    write_quorum_size: int) -> str | None:
        try:
            return self.policy.replacement(ensemble, candidates, failed=failed, write_quorum_size=write_quorum_size)
        except NotEnoughBookiesError:
            return None
