"""Ensemble-change decisions, replacement rebasing, the recovery plan and the close rules."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark_ledger.protocol.close_rules import CloseVerdict, recovery_close_point, writer_close_verdict
from pyspark_ledger.protocol.distribution import write_set_of
from pyspark_ledger.protocol.ensemble_change import plan_ensemble_change, rebase_replacements
from pyspark_ledger.protocol.recovery_plan import (
    Answer,
    decide_window,
    merge_answers,
    recovery_start,
    window_from,
)


def first_free(ensemble: Sequence[str], candidates: Sequence[str], failed: str = "") -> str | None:
    free = [c for c in candidates if c not in ensemble]
    return free[0] if free else None


def test_failed_bookie_is_replaced_from_the_first_unacked_entry() -> None:
    plan = plan_ensemble_change(("a", "b", "c"), {"b"}, set(), ["a", "b", "c", "d"], first_free,
                                write_quorum_size=3, ack_quorum_size=2, first_entry_id=7)
    assert plan.ensemble == ("a", "d", "c") and plan.replaced == {"b": "d"} and plan.first_entry_id == 7
    assert plan.needs_metadata_change and plan.error is None


def test_no_replacement_carries_on_while_quorums_are_reachable_else_errors() -> None:
    plan = plan_ensemble_change(("a", "b", "c"), {"b"}, set(), ["a", "b", "c"], first_free,
                                write_quorum_size=3, ack_quorum_size=2, first_entry_id=0)
    assert plan.unreplaced == ("b",) and plan.error is None and not plan.needs_metadata_change
    plan = plan_ensemble_change(("a", "b", "c"), {"c"}, {"b"}, ["a", "b", "c"], first_free,
                                write_quorum_size=3, ack_quorum_size=2, first_entry_id=0)
    assert plan.error is not None and "ack quorum 2" in plan.error


def test_failures_outside_the_current_ensemble_change_nothing() -> None:
    plan = plan_ensemble_change(("a", "b", "c"), {"x"}, set(), ["d"], first_free,
                                write_quorum_size=3, ack_quorum_size=2, first_entry_id=0)
    assert plan.ensemble == ("a", "b", "c") and not plan.replaced and not plan.unreplaced


def test_rebase_keeps_a_concurrent_replacement() -> None:
    """Two recoveries replace b: the second must not overwrite the first's choice."""
    assert rebase_replacements(("a", "b", "c"), {"b": "e"}) == ("a", "e", "c")
    assert rebase_replacements(("a", "d", "c"), {"b": "e"}) is None  # b already replaced by d
    assert rebase_replacements(("a", "d", "c"), {"b": "e", "c": "f"}) == ("a", "d", "f")
    assert rebase_replacements(("a", "e", "c"), {"c": "e"}) is None  # e already in the ensemble


def members(e: int) -> tuple[str, ...]:
    return write_set_of(e, ("a", "b", "c"), 3)


def test_recovery_starts_after_the_highest_lac_within_the_last_fragment() -> None:
    assert recovery_start({"a": 4, "b": 6}, 0) == 7
    assert recovery_start({"a": 4}, 9) == 9


def test_short_answers_are_progress_not_doubt() -> None:
    """The liveness defect: MiB entries make each bookie stop at its byte limit after one or two
    entries. The window decides what it can and the next one starts after it."""
    window = window_from(4, entries_max=512)
    answers: dict = {}
    merge_answers(answers, "a", {4: (Answer.PRESENT, "e4"), 5: (Answer.PRESENT, "e5")})
    merge_answers(answers, "b", {4: (Answer.PRESENT, "e4")})
    d = decide_window(window, answers, members, write_quorum_size=3, ack_quorum_size=2)
    assert d.found == ["e4", "e5"] and d.end is None and d.next_entry == 6 and d.progressed
    nxt = window_from(d.next_entry, entries_max=512)
    answers = {}
    for b in ("a", "b"):
        merge_answers(answers, b, {6: (Answer.ABSENT, None)})
    d = decide_window(nxt, answers, members, write_quorum_size=3, ack_quorum_size=2)
    assert d.found == [] and d.end == 6


def test_unknown_and_corrupt_never_count_as_absent() -> None:
    answers: dict = {}
    merge_answers(answers, "a", {0: (Answer.ABSENT, None)})
    merge_answers(answers, "b", {0: (Answer.UNKNOWN, "corrupt copy")})
    merge_answers(answers, "c", {0: (Answer.UNKNOWN, "timeout")})
    d = decide_window(window_from(0), answers, members, write_quorum_size=3, ack_quorum_size=2)
    assert d.end is None and d.undecided == 0 and not d.progressed
    merge_answers(answers, "c", {0: (Answer.PRESENT, "e0")})  # a later round upgrades the answer
    merge_answers(answers, "c", {0: (Answer.UNKNOWN, "late timeout")})  # and never downgrades it
    d = decide_window(window_from(0, entries_max=1), answers, members, write_quorum_size=3, ack_quorum_size=2)
    assert d.found == ["e0"] and d.next_entry == 1


def test_close_rules() -> None:
    assert writer_close_verdict("OPEN", None, 5) is CloseVerdict.WRITE
    assert writer_close_verdict("CLOSED", 5, 5) is CloseVerdict.DONE
    assert writer_close_verdict("CLOSED", 3, 5) is CloseVerdict.FENCED
    assert writer_close_verdict("IN_RECOVERY", None, 5) is CloseVerdict.FENCED
    assert recovery_close_point(None, 7) == 6 and recovery_close_point(9, 7) == 9
