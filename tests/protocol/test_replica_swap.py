"""replica_swap.decide_swap: what a re-replication does with a fragment and a swap record."""

from __future__ import annotations

from pyspark_ledger.protocol.replica_swap import COMMITTED, FINISH, ROLL_BACK, START, decide_swap

FRAGMENT = ("b0", "b1", "b2")
WRITABLE = ("b1", "b2", "b3", "b4")


def test_a_fragment_without_the_lost_bookie_was_committed_before() -> None:
    d = decide_swap(("b3", "b1", "b2"), "b0", True, "b3", WRITABLE, resume_swaps=True)
    assert d.action == COMMITTED and not d.chooses_anew


def test_no_record_starts_a_swap() -> None:
    assert decide_swap(FRAGMENT, "b0", False, None, WRITABLE, resume_swaps=True).action == START


def test_a_worker_finishes_a_predecessors_swap_to_the_same_bookie() -> None:
    d = decide_swap(FRAGMENT, "b0", True, "b3", WRITABLE, resume_swaps=True)
    assert (d.action, d.new) == (FINISH, "b3")


def test_a_record_naming_a_gone_taken_or_unreadable_replacement_is_rolled_back() -> None:
    assert decide_swap(FRAGMENT, "b0", True, "b5", WRITABLE, resume_swaps=True).action == ROLL_BACK  # not writable
    assert decide_swap(FRAGMENT, "b0", True, "b2", WRITABLE, resume_swaps=True).action == ROLL_BACK  # in the fragment
    assert decide_swap(FRAGMENT, "b0", True, None, WRITABLE, resume_swaps=True).action == ROLL_BACK  # unreadable


def test_a_caller_without_the_claim_records_its_own_choice() -> None:
    assert decide_swap(FRAGMENT, "b0", True, "b3", WRITABLE, resume_swaps=False).action == START
