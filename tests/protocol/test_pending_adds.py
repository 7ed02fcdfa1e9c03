"""Pending adds: ordered completions, and completions held across an ensemble change."""

from __future__ import annotations

import pytest

from pyspark_ledger.protocol.distribution import write_sets
from pyspark_ledger.protocol.invariants import InvariantError
from pyspark_ledger.protocol.pending_adds import PendingAdd, PendingAdds, id_ranges


def queue(n: int, ensemble=("b0", "b1", "b2"), w: int = 3, a: int = 2) -> PendingAdds:
    q = PendingAdds(a, write_sets(ensemble, w))
    for e in range(n):
        q.append(PendingAdd(e, 10))
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
        q.append(PendingAdd(5, 1))


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
    assert q.by_id[0].acked == {"b0": 1} and q.by_id[0].bookies == ("b0", "b1", "b3")
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


# ---- runs: one record, acks as bit masks ----------------------------------------------------------

def run_queue(sizes: list[list[int]], ensemble: tuple[str, ...] = ("b0", "b1", "b2"), w: int = 3,
              a: int = 2) -> PendingAdds:
    q = PendingAdds(a, write_sets(ensemble, w))
    for run in sizes:
        q.append(PendingAdd(q.next_entry_id, sum(run), run if len(run) > 1 else None))
    return q


def test_a_run_is_one_record_and_completes_a_prefix_at_a_time() -> None:
    q = run_queue([[1, 2, 3, 4], [5]])
    assert len(q) == 2 and q.pending_count == 5 and q.next_entry_id == 5
    assert q.on_acks("b0", range(0, 5)) == []
    assert q.on_acks("b1", [0, 1]) == []  # a prefix of the run: the LAC moves, the run stays
    assert (q.lac, q.length, q.pending_bytes, q.pending_count) == (1, 3, 12, 3)
    assert q.on_acks("b2", [3]) == []  # entry 3 has two acks, entry 2 one: the LAC waits at 1
    assert q.lac == 1
    done = q.on_acks("b1", [2, 3, 4])
    assert ids(done) == [0, 4] and q.lac == 4 and q.length == 15 and q.pending_count == 0


def test_an_answer_naming_entries_completed_long_ago_counts_the_rest() -> None:
    q = run_queue([[1, 1], [1, 1]])
    q.on_acks("b0", [0, 1])
    assert ids(q.on_acks("b1", [0, 1])) == [0]
    q.on_acks("b0", [0, 1, 2, 3])  # a late, longer answer: 0 and 1 are gone
    assert ids(q.on_acks("b1", [1, 2, 3])) == [2] and q.lac == 3


def test_a_run_over_e_greater_than_w_counts_each_entrys_own_write_set() -> None:
    """E 4, W 2, A 2: entry e lives on b(e mod 4) and b(e+1 mod 4). An ack from a bookie outside
    an entry's write set never counts, even inside a run the bookie answered whole."""
    q = run_queue([[1] * 6], ensemble=("b0", "b1", "b2", "b3"), w=2, a=2)
    p = q.by_id[0]
    assert p.stripes == {"b0": 0b011001, "b1": 0b110011, "b2": 0b100110, "b3": 0b001100}
    assert q.on_acks("b0", range(6)) == [] and p.acked == {"b0": 0b011001}
    assert q.on_acks("b1", range(6)) == [] and q.lac == 0  # entry 1 needs b2 too
    q.on_acks("b2", [1, 2, 5])
    assert q.lac == 1  # entry 2 needs b3
    assert ids(q.on_acks("b3", [2, 3])) == [0] and q.lac == 5


def test_a_change_keeps_only_acks_and_sends_of_each_entrys_new_write_set() -> None:
    q = run_queue([[1] * 6], ensemble=("b0", "b1", "b2", "b3"), w=2, a=2)
    p = q.by_id[0]
    p.sent = {b: p.stripe(b) for b in ("b0", "b1", "b2", "b3")}
    q.on_acks("b0", range(6))
    q.on_acks("b2", range(6))
    q.on_send_failed("b2", [1, 2, 5])
    assert "b2" not in p.sent  # every entry sent to b2 failed there
    q.begin_change()
    completed, resend = q.end_change(write_sets(("b0", "b1", "b9", "b3"), 2))
    assert completed == [] and resend == [p]
    assert p.acked == {"b0": 0b011001} and "b2" not in p.sent and p.stripe("b9") == 0b100110


def test_id_ranges() -> None:
    assert list(id_ranges([3, 4, 5])) == [(3, 5)]
    assert list(id_ranges(range(7, 9))) == [(7, 8)]
    assert list(id_ranges([0, 1, 4, 6, 7])) == [(0, 1), (4, 4), (6, 7)]
    assert list(id_ranges([])) == []
