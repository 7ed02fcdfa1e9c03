"""The writer machine: answers, metadata outcomes and time in; sends, changes, completions out."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from pyspark_ledger.protocol.invariants import InvariantError
from pyspark_ledger.protocol.pending_adds import PendingAdd, ids_of
from pyspark_ledger.protocol.writer_machine import (
    ChangeDone,
    Phase,
    Seal,
    Sealed,
    Stop,
    StopKind,
    WriteFragment,
    WriterMachine,
)


def first_candidate(ensemble: Sequence[str], candidates: Sequence[str], failed: str) -> str | None:
    return candidates[0] if candidates else None


def machine(n: int, ensemble: Sequence[str] = ("b0", "b1", "b2"), w: int = 3, a: int = 2) -> WriterMachine:
    m = WriterMachine(ensemble, write_quorum_size=w, ack_quorum_size=a)
    for e in range(n):
        m.append(PendingAdd(e, 10), m.lac, float(e))
    return m


def ids(runs: Sequence[PendingAdd]) -> list[int]:
    """Every entry id of these runs (a single add is a run of one)."""
    return ids_of(runs)


def sent(m: WriterMachine) -> dict[tuple[str, ...], list[int]]:
    """What the outbox sends, per group of bookies: the entry ids of its segments."""
    return {targets: [e for _, first, last in segments for e in range(first, last + 1)]
            for targets, segments in m.sends(m.take_outbox()).items()}


def test_entries_go_to_their_write_set_once_in_one_group_when_e_equals_w() -> None:
    m = machine(3)
    assert sent(m) == {("b0", "b1", "b2"): [0, 1, 2]}
    assert sent(m) == {}  # nothing queued any more
    assert m.sends(list(m.adds.entries)) == {}  # and nothing needs sending again


def test_striping_with_e_greater_than_w_groups_entries_by_their_write_set() -> None:
    m = machine(5, ensemble=("b0", "b1", "b2", "b3"), w=2, a=2)
    assert sent(m) == {("b0", "b1"): [0, 4], ("b1", "b2"): [1], ("b2", "b3"): [2], ("b0", "b3"): [3]}


def test_direct_send_only_for_a_lone_entry_with_nothing_queued() -> None:
    m = WriterMachine(("b0", "b1", "b2"), write_quorum_size=3, ack_quorum_size=2)
    assert m.append(PendingAdd(0, 10), -1, 0.0, direct=True)
    assert not m.append(PendingAdd(1, 10), -1, 0.0, direct=True)  # one is in flight
    assert ids(m.take_outbox()) == [1]


def test_acks_complete_in_order_with_a_from_the_write_set() -> None:
    m = machine(3)
    sent(m)
    assert m.on_acks("b0", [1, 2]) == [] and m.on_acks("b1", [2]) == []
    assert m.on_acks("b9", [0]) == []  # not in the write set: does not count
    assert ids(m.on_acks("b0", [0])) == []
    assert ids(m.on_acks("b2", [0, 1])) == [0, 1, 2]
    assert (m.lac, m.length) == (2, 30)


def test_a_failure_holds_completions_until_the_new_fragment_is_recorded() -> None:
    m = machine(2)
    sent(m)
    m.on_acks("b0", [0])
    assert m.on_add_failed("b2", [0, 1])  # start a change now
    assert m.on_acks("b1", [0]) == []  # A acks, but held: b2's successor is not recorded yet
    cmd = m.begin_change(["b0", "b1", "b2", "b3"], first_candidate)
    assert cmd == WriteFragment(0, ("b0", "b1", "b3"), {"b2": "b3"})
    assert not m.on_add_failed("b1", [1])  # reported during the change: the next change handles it
    assert sent(m) == {}  # nothing goes out while the write sets are about to change
    done = m.on_fragment_written()
    assert isinstance(done, ChangeDone) and ids(done.completed) == [0]
    assert m.ensemble == ("b0", "b1", "b3") and m.failed == {"b1"}
    assert sent(m) == {("b1", "b3"): [1]}  # entry 1: sent to b0 before; b1 failed, b3 is new


def test_acks_of_a_replaced_bookie_no_longer_count() -> None:
    m = machine(1)
    sent(m)
    m.on_acks("b2", [0])
    m.on_add_failed("b2", [])  # b2 failed later (another entry's send): it is replaced
    m.begin_change(["b3"], first_candidate)
    m.on_fragment_written()
    assert m.on_acks("b0", [0]) == []  # b2's ack left with it: one ack of the new write set
    assert ids(m.on_acks("b3", [0])) == [0]


def test_no_replacement_carries_on_without_the_bookie_while_a_is_reachable() -> None:
    m = machine(1, ensemble=("b0", "b1", "b2"), w=3, a=2)
    sent(m)
    m.on_add_failed("b1", [0])
    cmd = m.begin_change([], first_candidate)
    assert isinstance(cmd, ChangeDone) and cmd.unreplaced == ("b1",) and m.dead == {"b1"}
    assert sent(m) == {}  # the dead bookie is not retried
    m.on_acks("b0", [0])
    assert ids(m.on_acks("b2", [0])) == [0]
    assert not m.on_add_failed("b1", [1])  # a dead bookie's failures change nothing


def test_no_replacement_and_no_quorum_stops_the_writer_and_fails_every_entry() -> None:
    m = machine(2, a=3)
    m.on_add_failed("b1", [0])
    cmd = m.begin_change([], first_candidate)
    assert isinstance(cmd, Stop) and cmd.kind is StopKind.NO_QUORUM and ids(cmd.victims) == [0, 1]
    assert not m.live and len(m.adds) == 0
    with pytest.raises(InvariantError):
        m.append(PendingAdd(2, 10), -1, 0.0)  # a stopped writer takes no adds


def test_a_failure_outside_the_ensemble_changes_nothing() -> None:
    m = machine(1)
    assert not m.on_add_failed("b7", [0]) and m.failed == set()


def test_fragment_conflicts_retry_while_open_and_stop_when_fenced_or_exhausted() -> None:
    m = machine(1)
    m.on_add_failed("b0", [0])
    cmd = m.begin_change(["b3"], first_candidate)
    assert m.on_fragment_conflict("OPEN") == cmd  # the same fragment, on the version re-read
    stop = m.on_fragment_conflict("IN_RECOVERY")
    assert isinstance(stop, Stop) and stop.kind is StopKind.FENCED and ids(stop.victims) == [0]
    m2 = WriterMachine(("b0", "b1", "b2"), write_quorum_size=3, ack_quorum_size=2, cas_attempts_max=3)
    m2.append(PendingAdd(0, 10), -1, 0.0)
    m2.on_add_failed("b0", [0])
    m2.begin_change(["b3"], first_candidate)
    results = [m2.on_fragment_conflict("OPEN") for _ in range(3)]
    assert [type(r) for r in results] == [WriteFragment, WriteFragment, Stop]
    assert isinstance(results[-1], Stop) and results[-1].kind is StopKind.CONFLICT


def test_a_fenced_answer_stops_for_good_and_the_first_reason_stands() -> None:
    m = machine(2)
    stop = m.on_fenced("b1", "FENCED")
    assert stop.kind is StopKind.FENCED and ids(stop.victims) == [0, 1]
    assert m.stop(StopKind.FAILED, "later") is stop


def test_changes_without_progress_are_bounded() -> None:
    m = WriterMachine(("b0", "b1", "b2"), write_quorum_size=3, ack_quorum_size=2, changes_max=2)
    m.append(PendingAdd(0, 10), -1, 0.0)
    spare = [f"s{i}" for i in range(5)]
    kinds = []
    for _ in range(3):
        m.on_add_failed(m.ensemble[0], [0])
        cmd = m.begin_change(spare, first_candidate)
        if isinstance(cmd, WriteFragment):
            cmd = m.on_fragment_written()
        kinds.append(type(cmd))
    assert kinds == [ChangeDone, ChangeDone, Stop] and m.stopped is not None
    assert m.stopped.kind is StopKind.STUCK


def test_close_verdicts() -> None:
    m = machine(1)
    sent(m)
    m.on_acks("b0", [0]), m.on_acks("b1", [0])
    m.begin_close()
    assert m.phase is Phase.CLOSING
    assert m.close_command("OPEN", None) == Seal(0, 10)
    assert m.on_seal_conflict("CLOSED", 0) == Sealed(0, 10)  # somebody closed it where we would
    assert m.phase is Phase.CLOSED and not m.live
    other = machine(0)
    other.begin_close()
    stop = other.close_command("CLOSED", 5)
    assert isinstance(stop, Stop) and stop.kind is StopKind.FENCED and "closed by another client" in stop.message
    recovering = machine(0)
    recovering.begin_close()
    assert isinstance(recovering.close_command("IN_RECOVERY", None), Stop)


def test_close_refuses_adds_in_flight_and_a_second_close() -> None:
    m = machine(1)
    m.begin_close()
    with pytest.raises(InvariantError):
        m.close_command("OPEN", None)  # the driver settles or abandons them first
    assert ids(m.abandon()) == [0]
    assert m.close_command("OPEN", None) == Seal(-1, 0)
    with pytest.raises(InvariantError):
        m.begin_close()


def test_explicit_lac_is_due_after_the_interval_without_adds() -> None:
    m = machine(1)  # added at t=0, carrying LAC -1
    sent(m)
    assert not m.lac_due(10.0, 0.1)  # nothing acknowledged yet
    m.on_acks("b0", [0]), m.on_acks("b1", [0])
    assert not m.lac_due(0.05, 0.1) and m.lac_due(0.2, 0.1)
    assert m.explicit_lac() == (0, ("b0", "b1", "b2"))
    assert not m.lac_due(5.0, 0.1)  # sent: not due again until the LAC moves


@pytest.mark.parametrize("seed", range(40))
def test_random_answers_keep_completions_ordered_and_on_a_of_the_final_write_set(seed: int) -> None:
    """Random runs, acks (single ids and ranges), failures and changes: the LAC only moves
    forward, and every entry it passes had, at that moment, A acks from the write set the
    machine then names for it."""
    rng = random.Random(seed)
    bookies = [f"b{i}" for i in range(7)]
    m = WriterMachine(bookies[:4], write_quorum_size=3, ack_quorum_size=2)
    acked_by: dict[int, set[str]] = {}
    lac = -1

    def check(done: Sequence[PendingAdd]) -> None:
        nonlocal lac
        assert m.lac >= lac and all(lac < p.last <= m.lac for p in done)
        for eid in range(lac + 1, m.lac + 1):
            assert len(acked_by[eid] & set(m.write_set_for(eid))) >= 2
        lac = m.lac

    for step in range(300):
        if not m.live:
            break
        roll = rng.random()
        if roll < 0.2 and m.adds.pending_count < 12:
            first, n = m.adds.next_entry_id, rng.randint(1, 5)
            m.append(PendingAdd(first, n, [1] * n if n > 1 else None), m.lac, float(step))
            acked_by.update((e, set()) for e in range(first, first + n))
        elif roll < 0.85 and m.adds.entries:
            lo = rng.randrange(m.lac + 1, m.adds.next_entry_id)
            hi = rng.randrange(lo, m.adds.next_entry_id)
            b = rng.choice(m.write_set_for(lo))
            answered = list(range(lo, hi + 1))
            for e in answered:
                acked_by[e].add(b)  # counts only where b is in e's write set (checked above)
            check(m.on_acks(b, answered))
        elif roll < 0.92 and m.change is None:
            if m.on_add_failed(rng.choice(m.ensemble), [e for e in acked_by if e > m.lac]):
                cmd = m.begin_change([b for b in bookies if rng.random() < 0.7], first_candidate)
                if isinstance(cmd, WriteFragment):
                    cmd = m.on_fragment_written()
                if isinstance(cmd, ChangeDone):
                    check(cmd.completed)
        m.sends(m.take_outbox())
    assert lac == m.lac


# ---- runs (WriteHandle.add_entries_async) ------------------------------------------------------------

def run_of(m: WriterMachine, first: int, count: int) -> PendingAdd:
    return PendingAdd(first, 10 * count, [10] * count)


def test_a_run_is_one_decision_and_goes_direct_only_when_nothing_is_in_flight() -> None:
    m = WriterMachine(("b0", "b1", "b2"), write_quorum_size=3, ack_quorum_size=2)
    first = run_of(m, 0, 4)
    assert m.append(first, -1, 0.0, direct=True)  # idle: the caller sends it at once
    assert m.sends([first]) == {("b0", "b1", "b2"): [(first, 0, 3)]}  # E == W: the run goes whole to each bookie
    assert len(m.adds) == 1 and m.adds.pending_count == 4  # one record for the run
    second = run_of(m, 4, 3)
    assert not m.append(second, -1, 0.0, direct=True)  # the first is in flight: queued
    assert sent(m) == {("b0", "b1", "b2"): [4, 5, 6]}
    with pytest.raises(InvariantError):
        m.append(run_of(m, 9, 2), -1, 0.0)  # ids must follow on


def test_a_run_over_e_greater_than_w_is_cut_into_each_bookies_sub_runs() -> None:
    m = WriterMachine(("b0", "b1", "b2", "b3"), write_quorum_size=2, ack_quorum_size=2)
    m.append(run_of(m, 0, 6), -1, 0.0)
    groups = sent(m)
    assert groups == {("b0", "b1"): [0, 4], ("b1", "b2"): [1, 5], ("b2", "b3"): [2], ("b0", "b3"): [3]}
    per_bookie = {b: sorted(e for targets, es in groups.items() if b in targets for e in es) for b in m.ensemble}
    assert per_bookie == {"b0": [0, 3, 4], "b1": [0, 1, 4, 5], "b2": [1, 2, 5], "b3": [2, 3]}
    assert sent(m) == {}  # all sent
    assert m.sends(list(m.adds.entries)) == {}


def test_a_run_resent_after_a_change_goes_only_where_it_is_still_needed() -> None:
    m = WriterMachine(("b0", "b1", "b2"), write_quorum_size=3, ack_quorum_size=2)
    m.append(run_of(m, 0, 6), -1, 0.0)
    sent(m)
    m.on_acks("b0", range(6))
    m.on_acks("b1", range(3))  # 0-2 complete, b1 still owes 3-5
    assert m.lac == 2
    assert m.on_add_failed("b2", range(6))
    cmd = m.begin_change(["b3"], first_candidate)
    assert cmd == WriteFragment(3, ("b0", "b1", "b3"), {"b2": "b3"})
    done = m.on_fragment_written()
    assert isinstance(done, ChangeDone) and done.completed == []
    assert sent(m) == {("b3",): [3, 4, 5]}  # b0 acked, b1 has them in flight: only the newcomer
    assert ids(m.on_acks("b3", [3, 4, 5])) == [0, 1, 2, 3, 4, 5] and m.lac == 5


def test_a_run_refused_inside_completes_its_prefix_and_the_lac_never_passes_the_refusal() -> None:
    """Every bookie stores entries 0-2 of a run of 6 and refuses 3 on (TOO_LARGE: stored 3): the
    prefix completes, entry 3 and later never do, the writer stops without a quorum for them."""
    m = WriterMachine(("b0", "b1", "b2"), write_quorum_size=3, ack_quorum_size=2)
    m.append(run_of(m, 0, 6), -1, 0.0)
    sent(m)
    assert m.on_acks("b0", [0, 1, 2]) == []  # one ack each: A = 2 not reached
    assert m.on_acks("b1", [0, 1, 2]) == [] and m.lac == 2  # the prefix completes, the run stays
    assert m.on_add_failed("b0", [3, 4, 5])  # the refusal: a change is due
    assert m.on_acks("b2", [0, 1, 2]) == []  # nothing past 2 to complete
    m.on_add_failed("b1", [3, 4, 5])
    m.on_add_failed("b2", [3, 4, 5])
    cmd = m.begin_change([], first_candidate)  # no replacement for anyone: no quorum
    assert isinstance(cmd, Stop) and cmd.kind is StopKind.NO_QUORUM
    assert [(p.entry_id, p.done, p.last) for p in cmd.victims] == [(0, 3, 5)] and m.lac == 2
