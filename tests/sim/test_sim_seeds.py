"""The simulator over a few thousand seeds: every history keeps every invariant.

SIM_CI_SEEDS=N changes how many (the default keeps this test well under a minute on 2 cores)."""

from __future__ import annotations

import os

from pyspark_ledger.testing.sim.cli import replay_command, run_many

SEEDS = int(os.environ.get("SIM_CI_SEEDS", "5000"))


def test_thousands_of_seeds_keep_every_invariant() -> None:
    total, faults, failures, events = run_many(0, SEEDS, jobs=1)
    print(f"{total} seeds, {events} events, faults {dict(sorted(faults.items()))}")
    assert total == SEEDS
    # The histories are not trivial: every kind of fault was injected and entries were written.
    for kind in ("crash", "partition", "read_only", "fsync_failure", "corrupt", "slow", "meta_conflict",
                 "session_expiry", "zombie_pause", "loss", "duplicate"):
        assert faults[kind] > 0, kind
    assert not failures, "\n".join(f"seed {r.seed}: {r.violation}\n  {replay_command(r.seed)}\n  " +
                                   "\n  ".join(r.trace_tail) for r in failures[:3])
