"""Pending adds: ordered completions, and completions held across an ensemble change."""

from __future__ import annotations

import pytest

from pyspark_ledger.protocol.distribution import write_sets
from pyspark_ledger.protocol.invariants import InvariantError
from pyspark_ledger.protocol.pending_adds import PendingAdd, PendingAdds


def queue(n: int, ensemble=("b0", "b1", "b2"), w: int = 3, a: int = 2) -> PendingAdds:
    q = PendingAdds(a, write_sets(ensemble, w))
    for e in range(n):
        q.append(PendingAdd(e, 10, q.write_set_for(e)))
    return q


def ids(run: list[PendingAdd]) -> list[int]:
    return [p.entry_id for p in run]


def test_completions_are_in_entry_order_and_move_the_lac() -> None:
    q = queue(3)
    assert q.on_acks("b0", [1, 2]) == [] and q.on_acks("b1", [2]) == []  # entry 0 not yet: nothing completes
    assert q.lac == -1
    assert ids(q.on_acks("b0", [0])) == []
    assert ids(q.on_acks("b2", [0, 1])) == [0, 1, 2]
    assert (q.lac, q.length, q.pending_bytes, len(q)) == (2, 30, 0, 0)


def test_duplicate_and_foreign_acks_do_not_count() -> None:
    q = queue(1)
    q.on_acks("b0", [0])
    q.on_acks("b0", [0])  # a duplicated answer
    q.on_acks("b9", [0])  # a bookie outside the write set
    assert q.lac == -1
    assert ids(q.on_acks("b1", [0])) == [0]


def test_ids_are_queued_without_gaps() -> None:
    q = queue(2)
    with pytest.raises(InvariantError):
        q.append(PendingAdd(5, 1, q.write_set_for(5)))


def test_no_completion_during_an_ensemble_change_and_replaced_acks_are_dropped() -> None:
    """The safety defect: entry 0 acked by b0 and by b2, b2 then fails. Completing entry 0 on
    b2's ack while the new fragment (from entry 0) names b3 instead of b2 would leave it on one
    named bookie. Held, then re-counted against the new write set, it waits for b3."""
    q = queue(2)
    q.on_acks("b2", [0])
    q.on_send_failed("b2", [1])
    assert q.on_acks("b0", [0]) == []  # held: b2's ack may be about to stop counting
    first = q.begin_change()
    assert first == 0
    completed, resend = q.end_change(write_sets(("b0", "b1", "b3"), 3))
    assert completed == [] and ids(resend) == [0, 1]
    assert q.by_id[0].acked == ["b0"] and q.by_id[0].bookies == ("b0", "b1", "b3")
    assert ids(q.on_acks("b3", [0, 1])) == [0]
    assert ids(q.on_acks("b1", [1])) == [1]


def test_abandoned_change_keeps_write_sets_and_releases_held_completions() -> None:
    q = queue(1)
    q.on_acks("b0", [0])
    q.begin_change()
    assert q.on_acks("b1", [0]) == []
    completed, _ = q.end_change(None)
    assert ids(completed) == [0]


def test_fail_all_empties_the_queue() -> None:
    q = queue(3)
    assert ids(q.fail_all()) == [0, 1, 2]
    assert len(q) == 0 and q.pending_bytes == 0 and q.next_entry_id == 0
