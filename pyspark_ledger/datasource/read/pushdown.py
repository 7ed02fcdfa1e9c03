"""Filter pushdown (option pushFilters=true): which of Spark's filters a batch read applies itself.

Spark hands a reader the conjuncts of a query's WHERE clause (PySpark 4.1+,
DataSourceReader.pushFilters; source.py turns them into Conditions) and does not check the
ones the reader claims again, so every claimed condition is applied exactly here:

- on log, seq, ledger and timestamp, which are the same for every row of a ledger (rows.py), a
  condition keeps or drops whole ledgers at planning: a dropped ledger is never read, and its
  metadata is not even fetched (keeps_ledger runs before that). `timestamp` is the same for every
  row only where entries carry no time of their own; for the others (timed Arrow entries,
  message batches) time_filter.py prunes by the ledger's recorded append times and the reader
  applies the condition to every row;
- on entry, a comparison (=, <, <=, >, >=) cuts each ledger's span of entries at planning.

Anything else (index, data columns, IN or NOT on entry) is left to Spark. Comparisons follow
SQL: a null column (log and seq of a lone ledger's rows) matches no comparison, and NOT of an
unknown stays unknown, so such rows are dropped. No pyspark here.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark_ledger.datasource.read.ranges import Span
from pyspark_ledger.datasource.rows import RowPlace

OPTION = "pushFilters"
SESSION_SETTING = "spark.sql.python.filterPushdown.enabled"
# The columns whose value a whole ledger shares, and the entry id (rows.py's names). `timestamp`
# is shared only by a ledger whose entries carry no time of their own (time_filter.py otherwise).
PLACE_COLUMNS = ("log", "seq", "ledger")
LEDGER_COLUMNS = (*PLACE_COLUMNS, "timestamp")
ENTRY_COLUMN = "entry"
COMPARISONS = ("eq", "gt", "ge", "lt", "le")
OPS = (*COMPARISONS, "eq_null_safe", "in", "is_null", "is_not_null", "starts_with", "ends_with", "contains")
# IN lists longer than this are left to Spark (each is checked per ledger at planning).
IN_VALUES_MAX = 10_000


@dataclass(frozen=True, slots=True)
class Condition:
    """One pushed conjunct on a metadata column: `column op value`, negated when `negated`."""

    column: str  # rows.py's name (log, seq, ledger, entry, timestamp), not the output name
    op: str  # one of OPS
    value: Any = None  # a tuple for "in"; None for the null checks
    negated: bool = False

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"unknown filter operation {self.op!r}")


def micros(value: Any) -> Any:
    """A timestamp literal as microseconds since the epoch (the timestamp column's unit); a
    naive datetime is UTC (the source's session time zone)."""
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
        delta = aware - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return value


def _compare(op: str, a: Any, b: Any) -> bool:
    if op == "eq":
        return bool(a == b)
    if op == "gt":
        return bool(a > b)
    if op == "ge":
        return bool(a >= b)
    if op == "lt":
        return bool(a < b)
    return bool(a <= b)


def truth(cond: Condition, value: Any) -> bool | None:
    """SQL's three-valued truth of `cond` for a column holding `value` (None: null)."""
    literal = cond.value
    if cond.column == "timestamp":
        literal = tuple(map(micros, literal)) if cond.op == "in" else micros(literal)
    result: bool | None
    if cond.op == "is_null":
        result = value is None
    elif cond.op == "is_not_null":
        result = value is not None
    elif cond.op == "eq_null_safe":
        result = value == literal
    elif value is None or (literal is None and cond.op != "in"):
        result = None
    elif cond.op == "in":
        result = value in literal if None not in literal or value in literal else None
    elif cond.op in COMPARISONS:
        result = _compare(cond.op, value, literal)
    elif cond.op == "starts_with":
        result = str(value).startswith(literal)
    elif cond.op == "ends_with":
        result = str(value).endswith(literal)
    else:
        result = literal in str(value)
    if cond.negated and result is not None:
        result = not result
    return result


_LITERAL_TYPES: dict[str, tuple[type, ...]] = {
    "log": (str,), "ledger": (str,), "seq": (int,), "entry": (int,), "timestamp": (dt.datetime,)}


def _literal_fits(column: str, value: Any) -> bool:
    """A literal of the column's own type (or null): anything else Spark would cast first."""
    return value is None or (isinstance(value, _LITERAL_TYPES[column]) and not isinstance(value, bool))


def claimable(cond: Condition) -> bool:
    """Whether this module applies `cond` exactly (else Spark keeps it)."""
    if cond.column not in _LITERAL_TYPES:
        return False
    if cond.op == "in":
        values = cond.value if isinstance(cond.value, tuple) else ()
        fits = 0 < len(values) <= IN_VALUES_MAX and all(_literal_fits(cond.column, v) for v in values)
    elif cond.op in ("starts_with", "ends_with", "contains"):
        fits = isinstance(cond.value, str) and cond.column in ("log", "ledger")
    else:
        fits = _literal_fits(cond.column, cond.value)
    if cond.column == ENTRY_COLUMN:
        return fits and cond.op in COMPARISONS and not cond.negated and cond.value is not None
    return fits


def place_value(column: str, place: RowPlace) -> Any:
    """What the rows of a ledger read at `place` hold in a ledger column (timestamp in us)."""
    if column == "log":
        return place.log
    if column == "seq":
        return place.seq
    if column == "ledger":
        return place.ledger
    if column == "timestamp":
        return place.timestamp_ms * 1000
    raise ValueError(f"{column!r} is not one of {LEDGER_COLUMNS}")


@dataclass(frozen=True, slots=True)
class PushedFilters:
    """The conditions a read claimed (all of them claimable), applied at planning."""

    conditions: tuple[Condition, ...] = ()

    def __post_init__(self) -> None:
        for cond in self.conditions:
            if not claimable(cond):
                raise ValueError(f"condition {cond} cannot be applied exactly by the reader")

    def keeps_ledger(self, place: RowPlace, columns: tuple[str, ...] = LEDGER_COLUMNS) -> bool:
        """Whether the rows of the ledger at `place` pass every condition on `columns` (they all
        hold the same values there, so this is exact; PLACE_COLUMNS for a ledger whose rows carry
        times of their own)."""
        return all(truth(c, place_value(c.column, place)) is True
                   for c in self.conditions if c.column in columns)

    def seq_floor(self) -> int:
        """No row with seq below this passes (so planning may start a log there)."""
        floor = 0
        for c in self.conditions:
            if c.column == "seq" and not c.negated and isinstance(c.value, int):
                if c.op in ("eq", "ge", "eq_null_safe"):
                    floor = max(floor, c.value)
                elif c.op == "gt":
                    floor = max(floor, c.value + 1)
        return floor

    def entry_bounds(self) -> tuple[int, int | None]:
        """The entry ids [lo, hi] (hi None: no bound) that pass every entry condition."""
        lo, hi = 0, None
        for c in self.conditions:
            if c.column != ENTRY_COLUMN:
                continue
            v = int(c.value)
            if c.op in ("eq", "ge", "gt"):
                lo = max(lo, v + 1 if c.op == "gt" else v)
            if c.op in ("eq", "le", "lt"):
                top = v - 1 if c.op == "lt" else v
                hi = top if hi is None else min(hi, top)
        return lo, hi

    def cut_span(self, span: Span) -> Span | None:
        """The part of a ledger's span that the entry conditions keep, or None."""
        lo, hi = self.entry_bounds()
        first, last = max(span.first, lo), span.last if hi is None else min(span.last, hi)
        if last < first:
            return None
        return Span(first, last, span.skip_rows if first == span.first else 0,
                    span.keep_rows if last == span.last else None)


def claim(conditions: Sequence[Condition | None]) -> tuple[PushedFilters, list[int]]:
    """The filters a read applies, from Spark's conjuncts as Conditions (None: not on a
    metadata column, or of a form this module does not know), and the indexes of the
    conjuncts Spark must still check."""
    kept = [i for i, c in enumerate(conditions) if c is None or not claimable(c)]
    claimed = tuple(c for c in conditions if c is not None and claimable(c))
    return PushedFilters(claimed), kept
