"""Seeds that once found a bug, replayed on every run (each says what it caught)."""

from __future__ import annotations

import pytest

from pyspark_ledger.testing.sim.cli import replay_command
from pyspark_ledger.testing.sim.runner import run_seed

REGRESSION_SEEDS = {
    # Product (protocol room): two concurrent recoveries; one replaced a bookie of the last
    # fragment and had not yet copied the entries to it when the other closed the ledger, so an
    # acknowledged entry sat on 2 of A=3 named bookies of a CLOSED ledger. Fixed by
    # close_rules.recovery_close_verdict / first_changed_entry.
    598: "a recovery closed on fragments changed under its copies",
    # Simulator: a close whose CAS succeeded but whose reply reached a writer that had already
    # stopped went unrecorded; the checker now watches closes in the store itself.
    1932: "a close the checker did not see",
    # Simulator: a zombie writer's fragment CAS reply arrived after a recovery had changed the
    # fragments; the view check now compares with the value the writer wrote (its version).
    7800: "the writer's view compared with a later metadata version",
}


@pytest.mark.parametrize("seed", sorted(REGRESSION_SEEDS))
def test_regression_seed_keeps_every_invariant(seed: int) -> None:
    r = run_seed(seed)
    assert r.violation is None, f"{REGRESSION_SEEDS[seed]}: {r.violation}\n{replay_command(seed)}"
    assert r.events > 50
