"""The simulator over a few thousand seeds: every history keeps every invariant.

LEDGER_SIM_SEEDS=N changes how many (SIM_CI_SEEDS is the older name; the default keeps this test
well under a minute and a half on 2 cores); LEDGER_SIM_JOBS=J spreads them over J processes. The
issue 20 acceptance run is LEDGER_SIM_SEEDS=100000 LEDGER_SIM_JOBS=2 (or the CLI:
python -m pyspark_ledger.testing.sim --seeds 100000 --jobs 2)."""

from __future__ import annotations

import os

from pyspark_ledger.testing.sim.cli import replay_command, run_many

SEEDS = int(os.environ.get("LEDGER_SIM_SEEDS", os.environ.get("SIM_CI_SEEDS", "2000")))
JOBS = int(os.environ.get("LEDGER_SIM_JOBS", "2"))

FAULTS_EXPECTED = ("crash", "partition", "read_only", "fsync_failure", "corrupt", "slow", "meta_conflict",
                   "session_expiry", "zombie_pause", "loss", "duplicate",
                   # autorecovery: lost bookies, crashed auditors and workers (after every swap step)
                   "bookie_lost_for_good", "bookie_lost_then_back", "auditor_crash", "auditor_crash_mid_scan",
                   "worker_crash_after_prepared", "worker_crash_after_copying", "worker_crash_after_copied",
                   "worker_crash_after_committed", "worker_crash_anytime", "worker_pause", "replacement_read_only",
                   # the leader-change family: the lost bookie back and gone again while no auditor leads
                   "leader_change_bounce",
                   # run-encoded adds: a bookie refusing a run from one of its entries on
                   "run_refused")
ACTIVITY_EXPECTED = ("autorecovery_histories", "marks_written", "marks_cleared", "swaps_committed",
                     "swaps_resumed_from_record", "swap_records_of_dead_workers_cleared", "swaps_rolled_back",
                     "audit_scans_resumed", "runs")


def test_thousands_of_seeds_keep_every_invariant() -> None:
    total, faults, failures, events = run_many(0, SEEDS, jobs=JOBS)
    print(f"{total} seeds, {events} events, faults {dict(sorted(faults.items()))}")
    assert total == SEEDS
    # The histories are not trivial: every kind of fault was injected and entries were written,
    # and autorecovery swapped, resumed and rolled back replicas.
    for kind in FAULTS_EXPECTED:
        assert faults[kind] > 0, kind
    for kind in ACTIVITY_EXPECTED:
        assert faults[f"+{kind}"] > 0, kind
    assert not failures, "\n".join(f"seed {r.seed}: {r.violation}\n  {replay_command(r.seed)}\n  " +
                                   "\n  ".join(r.trace_tail) for r in failures[:3])
