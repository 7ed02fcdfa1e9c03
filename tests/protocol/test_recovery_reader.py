"""The recovery read loop as a pure machine: windows, short answers, stalls, the end."""

from __future__ import annotations

from pyspark_ledger.protocol.distribution import write_set_of
from pyspark_ledger.protocol.recovery_plan import Answer
from pyspark_ledger.protocol.recovery_reader import Done, Fail, Read, RecoveryReader, RetryAfter

ENSEMBLE = ("b0", "b1", "b2")


def members(e: int) -> tuple[str, ...]:
    return write_set_of(e, ENSEMBLE, 3)


def reader(start: int = 0, entries_max: int = 4, stalled_max: int = 3) -> RecoveryReader[str]:
    return RecoveryReader(start, members, bookies=ENSEMBLE, write_quorum_size=3, ack_quorum_size=2,
                          entries_max=entries_max, bytes_max=100, stalled_max=stalled_max)


def test_short_answers_move_the_window_and_the_first_absent_entry_ends_the_ledger() -> None:
    r = reader()
    cmd = r.first_command()
    assert cmd.window.first == 0 and cmd.window.last == 3
    # Every bookie answers only the first entry (its byte limit): short, but progress.
    for b in ENSEMBLE:
        r.on_answers(b, {0: (Answer.PRESENT, "e0")})
    cmd = r.end_round()
    assert isinstance(cmd, Read) and cmd.window.first == 1
    for b in ENSEMBLE:
        r.on_answers(b, {1: (Answer.PRESENT, "e1"), 2: (Answer.ABSENT, None)})
    done = r.end_round()
    assert isinstance(done, Done)
    assert done.last_entry == 1 and done.found == ["e0", "e1"]


def test_rounds_that_decide_nothing_retry_then_fail_naming_the_entry() -> None:
    r = reader(start=5, stalled_max=3)
    r.first_command()
    for b in ENSEMBLE:
        r.on_answers(b, {5: (Answer.UNKNOWN, "corrupt copy")})
    first = r.end_round()
    assert isinstance(first, RetryAfter) and first.stalled == 1 and first.window.first == 5
    r.on_answers("b0", {5: (Answer.ABSENT, None)})  # one absent of W-A+1=2 needed: still undecided
    assert isinstance(r.end_round(), RetryAfter)
    fail = r.end_round()
    assert isinstance(fail, Fail) and fail.entry == 5 and "entry 5" in fail.message


def test_a_progressing_round_resets_the_stall_count() -> None:
    r = reader(stalled_max=2)
    r.first_command()
    assert isinstance(r.end_round(), RetryAfter)  # nobody answered
    r.on_answers("b1", {0: (Answer.PRESENT, "e0")})
    assert isinstance(r.end_round(), Read)
    assert r.stalled == 0
    for b in ("b0", "b1"):
        r.on_answers(b, {1: (Answer.ABSENT, None)})
    done = r.end_round()
    assert isinstance(done, Done) and done.last_entry == 0


def test_answers_outside_the_window_are_ignored() -> None:
    r = reader(entries_max=2)
    r.first_command()
    for b in ENSEMBLE:
        r.on_answers(b, {0: (Answer.PRESENT, "e0"), 1: (Answer.PRESENT, "e1"), 2: (Answer.ABSENT, None)})
    cmd = r.end_round()
    assert isinstance(cmd, Read) and cmd.window.first == 2  # entry 2 was outside the window asked
