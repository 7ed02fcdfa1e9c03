"""One seed is one exact history; different seeds are different histories."""

from __future__ import annotations

from pyspark_ledger.testing.sim.runner import run_seed


def test_the_same_seed_twice_gives_the_same_history() -> None:
    for seed in (1, 17, 598, 4242):
        a, b = run_seed(seed, trace=True), run_seed(seed, trace=True)
        assert a.trace_all == b.trace_all
        assert (a.trace_hash, a.events, a.faults, a.violation) == (b.trace_hash, b.events, b.faults, b.violation)
        assert a.events > 50  # a real history, not an empty one


def test_different_seeds_give_different_histories() -> None:
    hashes = {run_seed(seed).trace_hash for seed in range(40)}
    assert len(hashes) == 40
