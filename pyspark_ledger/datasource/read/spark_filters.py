"""Spark's pushed filters (pyspark.sql.datasource, PySpark 4.1+) -> pushdown.Conditions.

Only the filter classes are imported (no session, no JVM). A filter on a column that is not a
metadata column of this read, on a nested path, or of a kind pushdown.py does not know becomes
None: Spark keeps it. The column names are the read's output names (a metadata column renamed
because a data column has its name, rows.meta_fields, is found under its new name).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
)

from pyspark_ledger.datasource.read.pushdown import Condition

_OPS: dict[type, str] = {
    EqualTo: "eq", GreaterThan: "gt", GreaterThanOrEqual: "ge", LessThan: "lt", LessThanOrEqual: "le",
    EqualNullSafe: "eq_null_safe", In: "in", IsNull: "is_null", IsNotNull: "is_not_null",
    StringStartsWith: "starts_with", StringEndsWith: "ends_with", StringContains: "contains",
}


def condition(f: Filter, meta_by_output: Mapping[str, str], negated: bool = False) -> Condition | None:
    """One filter as a Condition on a metadata column (rows.py's name), or None."""
    if isinstance(f, Not):
        return None if negated else condition(f.child, meta_by_output, True)
    op = _OPS.get(type(f))
    path: tuple[str, ...] = tuple(getattr(f, "attribute", ()))
    if op is None or len(path) != 1 or path[0] not in meta_by_output:
        return None
    value: Any = getattr(f, "value", None)
    if op == "in":
        value = tuple(value)
    return Condition(meta_by_output[path[0]], op, value, negated)


def conditions(filters: Sequence[Filter], output_names: Mapping[str, str]) -> list[Condition | None]:
    """Each filter's Condition (output_names: metadata name -> its name in the read's schema)."""
    by_output = {out: meta for meta, out in output_names.items()}
    return [condition(f, by_output) for f in filters]
