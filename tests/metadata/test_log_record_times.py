"""The time each ledger joined its log (LogLedger.ctime_ms), which a read from startingTimestamp
cuts by: the ledgers one commit appends (a Spark job's or micro-batch's output) join at one time,
even when the clock ticks while the change is built (the whole suite once met a 1 ms tick
between two ledgers of one job, and a read from the job's time lost the first ledger's rows)."""

from __future__ import annotations

import itertools

import pytest

from metadata import log_record
from metadata.ids import LedgerId
from metadata.log_record import LogRecord


def test_the_ledgers_of_one_commit_share_one_time(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = itertools.count(1_000)  # every look at the clock is a millisecond later
    monkeypatch.setattr(log_record, "now_ms", lambda: next(clock))
    rec = LogRecord("times")
    first = rec.with_ledgers_appended([LedgerId(0, 1), LedgerId(0, 2), LedgerId(0, 3)], [(1, 10)] * 3)
    second = first.with_ledgers_appended([LedgerId(0, 4), LedgerId(0, 5)], [(1, 10)] * 2)
    first_times = {lg.ctime_ms for lg in second.ledgers[:3]}
    second_times = {lg.ctime_ms for lg in second.ledgers[3:]}
    assert len(first_times) == 1 and len(second_times) == 1
    assert first_times.pop() < second_times.pop()  # a later commit is later
    assert [lg.seq for lg in second.ledgers] == [0, 1, 2, 3, 4]


def test_a_writer_rolling_over_stamps_each_ledger_when_it_joins(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = itertools.count(5_000)
    monkeypatch.setattr(log_record, "now_ms", lambda: next(clock))
    rec = LogRecord("rolls").with_ledger(LedgerId(0, 1)).with_ledger(LedgerId(0, 2))
    assert rec.ledgers[0].ctime_ms < rec.ledgers[1].ctime_ms
