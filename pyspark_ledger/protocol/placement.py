"""Ensemble placement: which bookies store a new ledger, and who replaces a failed one.

Pure functions of the candidate list; the client supplies writable, live, not-quarantined bookies.

Failure domains (issue 29, item 3; BookKeeper's rack- and region-aware policies). A bookie
registers a rack, `zone/rack` or `rack` (metadata.registry.BookieInfo.rack; bookies without one
all count as one rack, NO_RACK). Entry e is stored on the W bookies at ensemble indices
e mod E .. e+W-1 mod E (its write set), so a rack holds every copy of an entry exactly when it
holds a whole write set. RackAwarePlacement spreads each write set over as many racks as it can,
then over as many zones; replacing a failed bookie keeps the spread of the write sets it was in
and, among equally good choices, prefers the failed bookie's own rack (its rack still has room
and was chosen for a reason). The cluster settings min_racks_per_write_quorum (capped at W) and
enforce_min_racks make this a rule: enforced, a placement that cannot meet it fails with
NotEnoughRacksError naming the racks; not enforced, the best spread available is used and the
autorecovery auditor moves copies once more racks are writable (misplaced_bookies).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

from pyspark_ledger.errors import NotEnoughBookiesError, NotEnoughRacksError
from pyspark_ledger.protocol.invariants import ensure

NO_RACK = ""  # a bookie registered without a rack; all of them count as one rack
NO_RACK_NAME = "(no rack)"
# Randomised greedy placements tried per new ensemble; the best is kept. One suffices whenever
# E is a multiple of the racks available; the others help the cyclic cases (E=4, W=3, 3 racks).
PLACEMENT_ATTEMPTS_MAX = 4

RackOf = Mapping[str, str]  # bookie id -> rack, for every bookie the caller has seen registered


class PlacementPolicy(Protocol):
    def new_ensemble(self, ensemble_size: int, candidates: Sequence[str], *,
                     write_quorum_size: int | None = None) -> list[str]: ...

    def replacement(self, ensemble: Sequence[str], candidates: Sequence[str], *, failed: str | None = None,
                    write_quorum_size: int | None = None) -> str: ...


class RandomPlacement:
    """BookKeeper's default without racks: any E distinct writable bookies, uniformly at random."""

    def __init__(self, rng: random.Random | None = None):
        self.rng = rng or random.Random()

    def new_ensemble(self, ensemble_size: int, candidates: Sequence[str], *,
                     write_quorum_size: int | None = None) -> list[str]:
        pool = sorted(set(candidates))
        if len(pool) < ensemble_size:
            raise NotEnoughBookiesError(
                f"need {ensemble_size} writable bookies, {len(pool)} available ({', '.join(pool) or 'none'})"
            )
        return self.rng.sample(pool, ensemble_size)

    def replacement(self, ensemble: Sequence[str], candidates: Sequence[str], *, failed: str | None = None,
                    write_quorum_size: int | None = None) -> str:
        return self.rng.choice(_replacement_pool(ensemble, candidates))


@dataclass(frozen=True, slots=True)
class RackRules:
    """The placement rule, from the cluster settings (metadata/cluster_settings.py)."""

    min_racks_per_write_quorum: int = 2
    enforce: bool = False

    def required(self, write_quorum_size: int) -> int:
        """Racks a write set of W bookies must span: never more than W (BookKeeper caps it too)."""
        return min(write_quorum_size, self.min_racks_per_write_quorum)


def zone_of(rack: str) -> str:
    return rack.split("/", 1)[0] if "/" in rack else ""


def rack_name(rack: str) -> str:
    return rack or NO_RACK_NAME


@lru_cache(maxsize=256)
def write_sets(ensemble_size: int, write_quorum_size: int) -> tuple[tuple[int, ...], ...]:
    """The distinct write sets of a fragment as ensemble indices (one when W = E)."""
    ensure(1 <= write_quorum_size <= ensemble_size, f"write quorum {write_quorum_size} of ensemble {ensemble_size}")
    starts = 1 if write_quorum_size == ensemble_size else ensemble_size
    return tuple(tuple((s + k) % ensemble_size for k in range(write_quorum_size)) for s in range(starts))


@lru_cache(maxsize=1024)
def _near(slot: int, ensemble_size: int, write_quorum_size: int) -> tuple[int, ...]:
    """The other indices that share a write set with `slot` (cyclic distance under W)."""
    return tuple(sorted({(slot + d) % ensemble_size for d in range(1 - write_quorum_size, write_quorum_size)} - {slot}))


def rack_spread(racks_by_slot: Sequence[str], write_quorum_size: int) -> int:
    """The fewest distinct racks any write set spans."""
    return min(len({racks_by_slot[j] for j in ws}) for ws in write_sets(len(racks_by_slot), write_quorum_size))


def _score(racks_by_slot: Sequence[str], sets: Sequence[tuple[int, ...]]) -> tuple[int, int, int, int]:
    """Better placements compare greater: fewest racks of a write set, then racks summed over
    write sets, then the same for zones."""
    racks = [len({racks_by_slot[j] for j in ws}) for ws in sets]
    zones = [len({zone_of(racks_by_slot[j]) for j in ws}) for ws in sets]
    return min(racks), sum(racks), min(zones), sum(zones)


def _replacement_pool(ensemble: Sequence[str], candidates: Sequence[str]) -> list[str]:
    pool = sorted(set(candidates) - set(ensemble))
    if not pool:
        raise NotEnoughBookiesError(
            f"no writable bookie outside the ensemble {list(ensemble)} to replace a failed one"
        )
    return pool


def _greedy(ensemble_size: int, write_quorum_size: int, by_rack: Mapping[str, list[str]],
            rng: random.Random) -> list[str]:
    """Fill indices 0..E-1 in order, each from the rack (then zone) least present among the
    indices it shares a write set with; ties go to the rack with more bookies left, then at random."""
    left = {r: rng.sample(bs, len(bs)) for r, bs in by_rack.items()}
    racks: list[str | None] = [None] * ensemble_size
    out: list[str] = []
    for slot in range(ensemble_size):
        near = [r for j in _near(slot, ensemble_size, write_quorum_size) if (r := racks[j]) is not None]
        near_zones = [zone_of(r) for r in near]

        def key(r: str, near: list[str] = near, near_zones: list[str] = near_zones) -> tuple[int, int, int, float]:
            return near.count(r), near_zones.count(zone_of(r)), -len(left[r]), rng.random()

        rack = min((r for r in left if left[r]), key=key)
        racks[slot] = rack
        out.append(left[rack].pop())
    return out


class RackAwarePlacement:
    """Spread each write set over racks (then zones). `racks()` gives the rack of every bookie
    the caller has seen registered (the client's pool keeps it from the registry listing it
    reads anyway, so placement costs no metadata request); `rules` is replaced when the cluster
    settings change."""

    def __init__(self, racks: Callable[[], RackOf] = dict, rules: RackRules | None = None,
                 rng: random.Random | None = None):
        self.racks = racks
        self.rules = rules or RackRules()
        self.rng = rng or random.Random()

    def new_ensemble(self, ensemble_size: int, candidates: Sequence[str], *,
                     write_quorum_size: int | None = None) -> list[str]:
        pool = sorted(set(candidates))
        if len(pool) < ensemble_size:
            raise NotEnoughBookiesError(
                f"need {ensemble_size} writable bookies, {len(pool)} available ({', '.join(pool) or 'none'})"
            )
        w = min(write_quorum_size or ensemble_size, ensemble_size)
        rack_of = self.racks()
        by_rack: dict[str, list[str]] = {}
        for b in pool:
            by_rack.setdefault(rack_of.get(b, NO_RACK), []).append(b)
        sets = write_sets(ensemble_size, w)
        spread_max = min(w, len(by_rack))  # no write set can span more racks than exist
        if len(by_rack) == 1:  # one rack (or none registered): every choice is as good
            best, best_score = self.rng.sample(pool, ensemble_size), (1, len(sets), 1, len(sets))
        else:
            best, best_score = self._best_of_attempts(ensemble_size, w, by_rack, rack_of, spread_max)
        ensure(len(set(best)) == ensemble_size, "a new ensemble has E distinct bookies")
        required = self.rules.required(w)
        if self.rules.enforce and best_score[0] < required:
            raise NotEnoughRacksError(
                f"a write set of {w} needs bookies in {required} racks (enforce_min_racks) but "
                f"{describe_racks(pool, rack_of)}")
        return best

    def _best_of_attempts(self, ensemble_size: int, w: int, by_rack: Mapping[str, list[str]], rack_of: RackOf,
                          spread_max: int) -> tuple[list[str], tuple[int, int, int, int]]:
        sets = write_sets(ensemble_size, w)
        best_score, best = (-1, 0, 0, 0), list[str]()
        for _ in range(PLACEMENT_ATTEMPTS_MAX):
            ensemble = _greedy(ensemble_size, w, by_rack, self.rng)
            score = _score([rack_of.get(b, NO_RACK) for b in ensemble], sets)
            if score > best_score:
                best_score, best = score, ensemble
            if best_score[0] >= spread_max:
                break
        return best, best_score

    def replacement(self, ensemble: Sequence[str], candidates: Sequence[str], *, failed: str | None = None,
                    write_quorum_size: int | None = None) -> str:
        pool = _replacement_pool(ensemble, candidates)
        rack_of = self.racks()
        if failed is None or failed not in ensemble:
            # No slot to judge (a bookie added to the ensemble): the rack least used in it.
            used = Counter(rack_of.get(b, NO_RACK) for b in ensemble)
            return min(pool, key=lambda c: (used[rack_of.get(c, NO_RACK)], self.rng.random()))
        e = len(ensemble)
        w = min(write_quorum_size or e, e)
        slot = list(ensemble).index(failed)
        sets = [ws for ws in write_sets(e, w) if slot in ws]
        racks_by_slot = [rack_of.get(b, NO_RACK) for b in ensemble]
        failed_rack = rack_of.get(failed)

        def score(c: str) -> tuple[int, int, bool, int, int, float]:
            racks_by_slot[slot] = rack_of.get(c, NO_RACK)
            racks_min, racks_sum, zones_min, zones_sum = _score(racks_by_slot, sets)
            return racks_min, racks_sum, racks_by_slot[slot] == failed_rack, zones_min, zones_sum, self.rng.random()

        scored = [(score(c), c) for c in pool]
        best_score, best = max(scored)
        required = self.rules.required(w)
        if self.rules.enforce and best_score[0] < required:
            others = [b for b in ensemble if b != failed]
            raise NotEnoughRacksError(
                f"replacing {failed} in {list(ensemble)}: a write set of {w} needs bookies in {required} racks "
                f"(enforce_min_racks) but its other bookies are in {_rack_list(others, rack_of)} and the free "
                f"writable ones {describe_racks(pool, rack_of)}")
        return best


def _rack_list(bookies: Sequence[str], rack_of: RackOf) -> str:
    return ", ".join(sorted({rack_name(rack_of.get(b, NO_RACK)) for b in bookies})) or "none"


def describe_racks(writable: Sequence[str], rack_of: RackOf) -> str:
    """'writable bookies are in 2 racks: r1 (2), r2 (1); no writable bookie in r3' for an error."""
    counts = Counter(rack_of.get(b, NO_RACK) for b in writable)
    down = sorted(set(rack_of.values()) - set(counts))
    text = (f"writable bookies are in {len(counts)} rack(s): "
            + (", ".join(f"{rack_name(r)} ({n})" for r, n in sorted(counts.items())) or "none"))
    if down:
        text += f"; no writable bookie in {', '.join(rack_name(r) for r in down)}"
    return text


def misplaced_bookies(ensemble: Sequence[str], write_quorum_size: int, rack_of: RackOf, wanted: int) -> list[str]:
    """Bookies of a fragment to move to other racks so that every write set spans at least
    `wanted` racks (the caller caps `wanted` at the racks that have writable bookies, so moving
    can succeed). Greedy: repeatedly the index whose rack repeats in the most short write sets.
    Empty when the fragment already meets the rule."""
    e = len(ensemble)
    w = min(write_quorum_size, e)
    racks = [rack_of.get(b, NO_RACK) for b in ensemble]
    sets = write_sets(e, w)
    moved: list[int] = []
    for _ in range(e):
        short = [ws for ws in sets if len({racks[j] for j in ws}) < wanted]
        if not short:
            break
        repeats: Counter[int] = Counter()
        for ws in short:
            in_set = Counter(racks[j] for j in ws)
            repeats.update(j for j in ws if in_set[racks[j]] > 1 and j not in moved)
        if not repeats:
            break
        slot = max(repeats, key=lambda j: (repeats[j], j))
        moved.append(slot)
        racks[slot] = f"\0moved-{slot}"  # as if it went to a rack of its own
    return [ensemble[j] for j in sorted(moved)]
