"""Pushed `timestamp` conditions on rows whose entries carry their own times: the ledger test by
its recorded append times, and the exact test of the rows themselves.

A ledger whose entries carry their own times (timed Arrow entries, message batches) does not
share one timestamp, so pushdown.py's ledger rule (every row holds the join time) cannot decide
it. Instead:

- at planning, `may_hold` drops a ledger only when no time within its recorded append times
  (LogLedger.append_times_ms, whole ms) passes every condition; a ledger without recorded times
  is kept;
- the reader then applies the conditions exactly to every row it reads (`mask`, pyarrow.compute
  over the rows' times, never a Python loop per row), since Spark does not check a claimed
  filter again. An Arrow entry's rows share its time, so the reader asks once per entry (`keeps`).

The rows' times are the ones the read shows in `timestamp` (ms since the epoch, as microseconds
in the column), worked out by the reader whether or not the column is among the read's output
columns. SQL semantics as pushdown.truth: `timestamp` is never null, a comparison with a null
literal is unknown (the row is dropped), NOT of unknown stays unknown. No pyspark here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pyspark_ledger.datasource.read.pushdown import Condition, micros

COLUMN = "timestamp"
_COMPARE = {"eq": pc.equal, "gt": pc.greater, "ge": pc.greater_equal, "lt": pc.less, "le": pc.less_equal}
# The negation of each comparison (a never-null column: NOT (t > v) is t <= v).
_NEGATED = {"gt": "le", "ge": "lt", "lt": "ge", "le": "gt"}
# Interval ends past any time (Python ints: exact, unlike floats, for any literal).
_FAR_US = 2**80
_EVERY = (-_FAR_US, _FAR_US)
_NONE = (_FAR_US, -_FAR_US)


def _literal(cond: Condition) -> object:
    return tuple(map(micros, cond.value)) if cond.op == "in" else micros(cond.value)


def _one_mask(cond: Condition, us: pa.Array) -> pa.Array:
    """SQL's truth of `cond` per row (null: unknown), `us` the rows' times in microseconds."""
    n = len(us)
    value = _literal(cond)
    result: pa.Array
    if cond.op in ("is_null", "is_not_null"):
        result = pa.array(np.full(n, cond.op == "is_not_null"))  # timestamp is never null
    elif cond.op == "eq_null_safe":
        result = pa.array(np.zeros(n, dtype=bool)) if value is None else pc.equal(us, pa.scalar(value, pa.int64()))
    elif cond.op == "in":
        values = tuple(v for v in value if v is not None)  # type: ignore[attr-defined]  # a tuple for "in"
        result = pc.is_in(us, value_set=pa.array(values, pa.int64()))
        if len(values) != len(value):  # type: ignore[arg-type]  # x IN (.., NULL): unknown where not found
            result = pc.if_else(result, True, pa.scalar(None, pa.bool_()))
    elif value is None:
        result = pa.nulls(n, pa.bool_())
    else:
        result = _COMPARE[cond.op](us, pa.scalar(value, pa.int64()))
    return pc.invert(result) if cond.negated else result


def _interval_us(cond: Condition) -> tuple[int, int]:
    """A superset of the times (us) that can pass `cond`, as [lo, hi]."""
    value = _literal(cond)
    op, negated = cond.op, cond.negated
    if op in ("is_null", "is_not_null"):
        return _EVERY if (op == "is_not_null") != negated else _NONE
    if op == "in":
        values = [v for v in value if v is not None]  # type: ignore[attr-defined]  # a tuple for "in"
        if negated:
            return _NONE if len(values) != len(value) else _EVERY  # type: ignore[arg-type]  # NOT IN (.., NULL): never
        return (min(values), max(values)) if values else _NONE
    if value is None:
        return _EVERY if op == "eq_null_safe" and negated else _NONE
    if negated:
        if op in ("eq", "eq_null_safe"):
            return _EVERY  # all but one time: no interval to cut
        op = _NEGATED[op]
    v = int(value)  # type: ignore[call-overload]  # microseconds
    return {"eq": (v, v), "eq_null_safe": (v, v), "gt": (v + 1, _FAR_US), "ge": (v, _FAR_US),
            "lt": (-_FAR_US, v - 1), "le": (-_FAR_US, v)}[op]


class TimeFilter:
    """The claimed conditions on `timestamp`, for rows whose times are their own."""

    __slots__ = ("conditions",)

    def __init__(self, conditions: Sequence[Condition]):
        for c in conditions:
            if c.column != COLUMN:
                raise ValueError(f"condition {c} is not on {COLUMN}")
        self.conditions = tuple(conditions)

    def __bool__(self) -> bool:
        return bool(self.conditions)

    def mask(self, times_ms: np.ndarray) -> pa.BooleanArray:
        """Whether each row (its time in ms) passes every condition: exact, in bulk."""
        us = pa.array(np.asarray(times_ms, dtype=np.int64) * 1000)
        out = pa.array(np.ones(len(us), dtype=bool))
        for cond in self.conditions:
            out = pc.and_(out, pc.fill_null(_one_mask(cond, us), False))  # only True passes (SQL WHERE)
        return out

    def keeps(self, time_ms: int) -> bool:
        """Whether rows at `time_ms` (an Arrow entry's, which all its rows share) pass."""
        return bool(self.mask(np.array([time_ms], dtype=np.int64))[0].as_py())

    def may_hold(self, times_ms: tuple[int, int] | None) -> bool:
        """Whether a ledger whose rows' times are within `times_ms` (whole ms, inclusive; None:
        unknown) may hold a row that passes: False only when no whole ms in it can."""
        if times_ms is None:
            return True
        lo_us, hi_us = times_ms[0] * 1000, times_ms[1] * 1000
        for cond in self.conditions:
            c_lo, c_hi = _interval_us(cond)
            lo_us, hi_us = max(lo_us, c_lo), min(hi_us, c_hi)
        # A row's time is a whole ms: some multiple of 1000 must lie in [lo_us, hi_us].
        return -(-lo_us // 1000) <= hi_us // 1000


def time_filter(conditions: Sequence[Condition]) -> TimeFilter:
    """The `timestamp` conditions among a read's claimed ones."""
    return TimeFilter([c for c in conditions if c.column == COLUMN])

