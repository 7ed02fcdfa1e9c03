"""A recovery closes only on the fragments its copies were made to (simulator seed 598)."""

from __future__ import annotations

from pyspark_ledger.protocol.close_rules import RecoveryCloseVerdict, recovery_close_verdict


def test_a_concurrent_replacement_after_the_copies_calls_for_replicating_again() -> None:
    replicated = [(0, ("b0", "b1", "b2")), (4, ("b0", "b1", "b4"))]
    # Another recovery replaced b4 by b2's neighbour b3 in the last fragment meanwhile: b3 never
    # received entries 4.. from this recovery, so closing now would name a bookie without them.
    now = [(0, ("b0", "b1", "b2")), (4, ("b0", "b1", "b3"))]
    assert recovery_close_verdict("IN_RECOVERY", now, replicated) is RecoveryCloseVerdict.REPLICATE_AGAIN


def test_unchanged_fragments_close_and_a_closed_ledger_is_adopted() -> None:
    frags = [(0, ["b0", "b1", "b2"])]
    assert recovery_close_verdict("IN_RECOVERY", frags, [(0, ("b0", "b1", "b2"))]) is RecoveryCloseVerdict.CLOSE
    other = [(0, ("b5", "b1", "b2"))]
    assert recovery_close_verdict("CLOSED", other, frags) is RecoveryCloseVerdict.ADOPT


def test_first_changed_entry_is_where_the_ensembles_part() -> None:
    from pyspark_ledger.protocol.close_rules import first_changed_entry

    base = [(0, ("b0", "b1", "b2")), (4, ("b0", "b1", "b4"))]
    assert first_changed_entry(base, base) is None
    assert first_changed_entry([(0, ("b0", "b1", "b2")), (4, ("b0", "b1", "b3"))], base) == 4
    assert first_changed_entry(base + [(7, ("b5", "b1", "b4"))], base) == 7  # a fragment added
    assert first_changed_entry([(0, ("b0", "b1", "b2")), (6, ("b0", "b1", "b3"))], base) == 4
    assert first_changed_entry([(0, ("b9", "b1", "b2"))], base) == 0


def test_recovery_fragments_apply_replacements_from_the_start_in_the_last_fragment() -> None:
    from pyspark_ledger.protocol.ensemble_change import recovery_fragments

    read = [(0, ("b0", "b1", "b2")), (4, ("b0", "b1", "b3"))]
    assert recovery_fragments(read, {}, 6) == ((0, ("b0", "b1", "b2")), (4, ("b0", "b1", "b3")))
    # A failed bookie replaced from the recovery's start: entries 4..5 stay where they were acknowledged.
    assert recovery_fragments(read, {"b3": "b5"}, 6) == (
        (0, ("b0", "b1", "b2")), (4, ("b0", "b1", "b3")), (6, ("b0", "b1", "b5")))
    # Starting at the last fragment's first entry, that fragment's ensemble is replaced.
    assert recovery_fragments(read, {"b3": "b5"}, 2) == ((0, ("b0", "b1", "b2")), (4, ("b0", "b1", "b5")))
    # Chained replacements (b3 -> b5, then b5 -> b6) land on the last newcomer.
    assert recovery_fragments(read, {"b3": "b5", "b5": "b6"}, 6)[-1] == (6, ("b0", "b1", "b6"))
