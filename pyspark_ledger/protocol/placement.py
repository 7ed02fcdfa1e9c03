"""Ensemble placement: which bookies store a new ledger, and who replaces a failed one.

Pure functions of the candidate list; the client supplies writable, live, not-quarantined bookies.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol

from pyspark_ledger.errors import NotEnoughBookiesError


class PlacementPolicy(Protocol):
    def new_ensemble(self, ensemble_size: int, candidates: Sequence[str]) -> list[str]: ...

    def replacement(self, ensemble: Sequence[str], candidates: Sequence[str]) -> str: ...


class RandomPlacement:
    """BookKeeper's default without racks: any E distinct writable bookies, uniformly at random."""

    def __init__(self, rng: random.Random | None = None):
        self.rng = rng or random.Random()

    def new_ensemble(self, ensemble_size: int, candidates: Sequence[str]) -> list[str]:
        pool = sorted(set(candidates))
        if len(pool) < ensemble_size:
            raise NotEnoughBookiesError(
                f"need {ensemble_size} writable bookies, {len(pool)} available ({', '.join(pool) or 'none'})"
            )
        return self.rng.sample(pool, ensemble_size)

    def replacement(self, ensemble: Sequence[str], candidates: Sequence[str]) -> str:
        pool = sorted(set(candidates) - set(ensemble))
        if not pool:
            raise NotEnoughBookiesError(
                f"no writable bookie outside the ensemble {list(ensemble)} to replace a failed one"
            )
        return self.rng.choice(pool)
