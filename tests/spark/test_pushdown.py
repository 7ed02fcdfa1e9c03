"""Filter pushdown's conditions (read/pushdown.py), without a JVM: what is claimed, and that
planning with them keeps exactly the rows the filters keep."""

from __future__ import annotations

import datetime as dt
import itertools

import pytest

from pyspark_ledger.datasource.read.pushdown import Condition, PushedFilters, claim, claimable, truth
from pyspark_ledger.datasource.read.ranges import Span
from pyspark_ledger.datasource.rows import RowPlace

T0 = 1_700_000_000_000
PLACES = [RowPlace("a", s, f"{s:032x}", T0 + s * 1000) for s in range(20)] + [RowPlace(None, None, "f" * 32, T0)]


def at(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


def row_passes(cond: Condition, place: RowPlace, entry: int) -> bool:
    """The filter as Spark would apply it to one row (the reference the planner must match)."""
    values = {"log": place.log, "seq": place.seq, "ledger": place.ledger, "entry": entry,
              "timestamp": at(place.timestamp_ms)}
    v, lit = values[cond.column], cond.value
    if isinstance(lit, dt.datetime) and lit.tzinfo is None:
        lit = lit.replace(tzinfo=dt.UTC)  # Spark's session time zone in these tests
    ops = {"eq": lambda: v == lit, "gt": lambda: v > lit, "ge": lambda: v >= lit, "lt": lambda: v < lit,
           "le": lambda: v <= lit, "in": lambda: v in lit, "starts_with": lambda: v.startswith(lit)}
    if cond.op == "is_null":
        return (v is None) != cond.negated
    if cond.op == "is_not_null":
        return (v is not None) != cond.negated
    if cond.op == "eq_null_safe":
        return (v == lit) != cond.negated
    if v is None or lit is None:
        return False
    return bool(ops[cond.op]()) != cond.negated


CONDITIONS = [
    Condition("seq", "ge", 15), Condition("seq", "gt", 15), Condition("seq", "lt", 3), Condition("seq", "le", 3),
    Condition("seq", "eq", 7), Condition("seq", "eq", 7, negated=True), Condition("seq", "in", (1, 4, 40)),
    Condition("seq", "is_null"), Condition("seq", "is_not_null"), Condition("seq", "eq_null_safe", None),
    Condition("log", "eq", "a"), Condition("log", "starts_with", "b"), Condition("ledger", "eq", f"{5:032x}"),
    Condition("timestamp", "ge", at(T0 + 10_000)), Condition("timestamp", "lt", at(T0 + 2_500)),
    Condition("timestamp", "gt", dt.datetime(2023, 11, 14, 22, 13, 30)),  # naive: UTC
    Condition("entry", "ge", 30), Condition("entry", "lt", 5), Condition("entry", "eq", 44),
]


@pytest.mark.parametrize("pair", list(itertools.combinations(CONDITIONS, 2)))
def test_planning_keeps_exactly_the_rows_the_filters_keep(pair: tuple[Condition, Condition]) -> None:
    pushed = PushedFilters(pair)
    for place in PLACES:
        kept = set()
        if pushed.keeps_ledger(place):
            span = pushed.cut_span(Span(0, 49))
            kept = set() if span is None else set(range(span.first, span.last + 1))
        expected = {e for e in range(50) if all(row_passes(c, place, e) for c in pair)}
        assert kept == expected, (place, pair)


def test_claimed_and_left_to_spark() -> None:
    conds = [Condition("seq", "ge", 3), None, Condition("entry", "in", (1, 2)), Condition("entry", "eq", 1, negated=True),
             Condition("seq", "eq", "3"), Condition("timestamp", "ge", 5), Condition("entry", "le", 9)]
    pushed, kept = claim(conds)
    assert pushed.conditions == (conds[0], conds[6]) and kept == [1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match="cannot be applied exactly"):
        PushedFilters((Condition("entry", "in", (1,)),))
    assert not claimable(Condition("seq", "eq", True))  # a bool is not a seq


def test_a_span_cut_inside_keeps_row_limits_only_at_its_own_ends() -> None:
    pushed = PushedFilters((Condition("entry", "ge", 3),))
    assert pushed.cut_span(Span(0, 9, 2, 4)) == Span(3, 9, 0, 4)
    assert PushedFilters((Condition("entry", "le", 9),)).cut_span(Span(0, 9, 2, 4)) == Span(0, 9, 2, 4)
    assert PushedFilters((Condition("seq", "gt", 389),)).seq_floor() == 390


def test_sql_nulls_in_lists_and_negations() -> None:
    assert truth(Condition("seq", "in", (1, None)), 2) is None
    assert truth(Condition("seq", "in", (1, None)), 1) is True
    assert truth(Condition("seq", "eq", 1, negated=True), None) is None
