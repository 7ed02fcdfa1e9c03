"""The audit scan's cursor (autorecovery/audit_scan.py) across a leader change.

A successor resumes its predecessor's scan from the saved cursor, but never counts a resumed scan
as an audit: a lost bookie may come back and go again while no auditor leads, and be placed in a
ledger the cursor had passed. The rule is pure (choose_scan, audited_by) and the simulator runs it
(testing/sim/auditor.py) in the leader-change family (testing/sim/autorecovery.py); the planted
defects below are put back in this test only and must be caught within a bounded number of seeds."""

from __future__ import annotations

import pytest

from metadata import LedgerId
from pyspark_ledger.autorecovery import audit_scan
from pyspark_ledger.autorecovery.audit_scan import ScanChoice, ScanCursor, audited_by, choose_scan
from pyspark_ledger.testing.sim import auditor as sim_auditor
from tests.sim.test_mutations import AUTORECOVERY_SEEDS_MAX, first_violation

# Seeds the simulator needed when this was written: 323 (trusting the cursor), 65 (and skipping).
CURSOR_SEEDS_MAX = 1500


def test_the_resumed_cursor_rule() -> None:
    cursor = ScanCursor(("a", "b"), LedgerId(0, 40))
    # Resumed, for its bookies still lost only; a bookie lost meanwhile gets a scan of its own later.
    choice = choose_scan(cursor, {"a", "c"}, set())
    assert choice == ScanChoice(ScanCursor(("a",), LedgerId(0, 40)), resumed=True)
    assert audited_by(choice) == (), "a resumed scan is no audit: a scan from the start follows"
    fresh = choose_scan(None, {"a", "c"}, set())
    assert fresh == ScanChoice(ScanCursor(("a", "c"), None), resumed=False)
    assert audited_by(fresh) == ("a", "c")
    assert choose_scan(None, {"a"}, {"a"}) is None, "an audited loss is not scanned again"
    # The cursor's bookies all came back: scan what is lost and not audited, from the start.
    assert choose_scan(cursor, {"c"}, set()) == ScanChoice(ScanCursor(("c",), None), resumed=False)


def test_a_successor_that_trusts_the_resumed_cursor_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defect: the successor counts the resumed scan as a full audit (the code before this rule):
    the lost bookie that came back during the leader change and was placed in a ledger behind
    the cursor is never marked there."""
    monkeypatch.setattr(sim_auditor, "audited_by", lambda choice: choice.cursor.bookies)
    needed, r = first_violation(lambda v: "still names lost bookies" in v, seeds_max=CURSOR_SEEDS_MAX)
    print(f"\ntrusting the resumed cursor: caught after {needed} seeds (seed {r.seed}): {r.violation}")
    assert r.faults["leader_change_bounce"] > 0 or r.faults["auditor_crash_mid_scan"] > 0


def test_a_cursor_that_skips_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defect: the successor resumes one ledger past the cursor, and trusts what it resumed."""
    real = audit_scan.choose_scan

    def skipping(left_over: ScanCursor | None, lost_now: set[str], audited: set[str]) -> ScanChoice | None:
        choice = real(left_over, lost_now, audited)
        if choice is not None and choice.resumed and choice.cursor.after is not None:
            after = LedgerId(0, choice.cursor.after.id + 1)
            return ScanChoice(ScanCursor(choice.cursor.bookies, after), resumed=True)
        return choice

    monkeypatch.setattr(sim_auditor, "choose_scan", skipping)
    monkeypatch.setattr(sim_auditor, "audited_by", lambda choice: choice.cursor.bookies)
    needed, r = first_violation(lambda v: "still names lost bookies" in v, seeds_max=AUTORECOVERY_SEEDS_MAX)
    print(f"\na cursor that skips: caught after {needed} seeds (seed {r.seed}): {r.violation}")
