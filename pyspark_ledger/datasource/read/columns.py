"""Which columns a read returns: the log's data columns, then the metadata columns it keeps.

Option `metadataColumns` (parsed by options/metadata_columns.py) chooses the metadata columns
(rows.py): `all` (the default: all six), `none`, or a comma-separated subset of log, seq,
ledger, entry, index, timestamp. A user-given schema (`spark.read.schema(...)`) chooses the
same way: its data columns must be the log's (names and types, in order), and every other
field must be a metadata column. Spark turns every column of the schema into JVM rows, at
about 0.2-0.5 us a row per metadata column, so the columns a query does not need are best left
out here (the Python data source API has no column pruning of its own).

A row turns back into a position (a startingPosition just after it) with seq, ledger, entry and
index; a read of several logs needs log too (STARTING_POSITION_COLUMNS). No pyspark here:
source.py turns the Arrow schema into Spark's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from pyspark_ledger.datasource.errors import LedgerUserError
from pyspark_ledger.datasource.rows import HEADER_FIELDS, HEADERS_NAME, HEADERS_TYPE, META_NAMES, meta_fields

# The columns a row needs to become a position again (positions.py: seq, ledger, entry, index),
# plus log when a read covers several logs.
POSITION_COLUMNS = ("seq", "ledger", "entry", "index")
STARTING_POSITION_COLUMNS = ("log", *POSITION_COLUMNS)


class ReadSchemaError(LedgerUserError, ValueError):
    """A schema given with spark.read.schema(...) that this log cannot be read as."""


@dataclass(frozen=True, slots=True)
class ReadColumns:
    """The output of a read: `data_count` data columns, then the metadata columns META_NAMES[i]
    for i in `meta_positions`, in that order (the exact schema Spark checks every batch against)."""

    schema: pa.Schema
    data_count: int
    meta_positions: tuple[int, ...]
    headers: bool = False  # a last `headers` column (option includeHeaders, rows.py)
    event_time: bool = False  # option timestampSource=event: `timestamp` is the event time where given

    def __post_init__(self) -> None:
        if len(self.schema) != self.data_count + len(self.meta_positions) + self.headers:
            raise ValueError(f"a read schema of {len(self.schema)} columns for {self.data_count} data and "
                             f"{len(self.meta_positions)} metadata columns{' and headers' if self.headers else ''}")

    @property
    def headers_type(self) -> pa.DataType:
        return self.schema.field(len(self.schema) - 1).type

    @property
    def meta_names(self) -> tuple[str, ...]:
        return tuple(META_NAMES[i] for i in self.meta_positions)

    def pick(self, meta: list[pa.Array]) -> list[pa.Array]:
        """Of the six metadata arrays (rows.py's order), the ones this read returns."""
        if len(self.meta_positions) == len(META_NAMES):
            return meta
        return [meta[i] for i in self.meta_positions]

    def output_names(self) -> dict[str, str]:
        """Metadata column name (rows.py) -> its name in this read's schema (renamed when a data
        column has the name, rows.meta_fields)."""
        return {META_NAMES[i]: self.schema.field(self.data_count + k).name for k, i in enumerate(self.meta_positions)}


def chosen_columns(data: pa.Schema, chosen: Sequence[str], headers: bool = False) -> ReadColumns:
    """The log's data columns, the chosen metadata columns (parse_metadata_columns), then
    `headers` when asked (includeHeaders, whatever metadataColumns says)."""
    every = meta_fields(data.names)  # names as with all six, so a column's name never depends on the choice
    positions = tuple(i for i, name in enumerate(META_NAMES) if name in chosen)
    tail = [pa.field(HEADERS_NAME, HEADERS_TYPE)] if headers else []
    return ReadColumns(pa.schema([*data, *(every[i] for i in positions), *tail]), len(data), positions, headers)


def user_columns(data: pa.Schema, user: pa.Schema, *, event_time: bool = False) -> ReadColumns:
    """A user-given schema, checked against the log's data columns: those first, all of them,
    same names and types (nullability aside), then metadata columns only, each once, in any
    order, and last, optionally, `headers` (the schema includeHeaders gives). The error says
    what differs."""
    n = len(data)
    given = list(user)
    headers = bool(given) and len(given) > n and given[-1].name == HEADERS_NAME and HEADERS_NAME not in data.names
    if headers:
        _check_headers_type(given[-1].type)
        given = given[:-1]
    expected = ", ".join(f"{f.name} {f.type}" for f in data)
    if len(given) < n or any(g.name != d.name or g.type != d.type for g, d in zip(given, data)):
        shown = ", ".join(f"{f.name} {f.type}" for f in given[:n])
        raise ReadSchemaError(f"the given schema (spark.read.schema) must start with the log's data columns ({expected}), "
                          f"found ({shown}); metadata columns ({', '.join(META_NAMES)}) may follow")
    by_name = {f.name: (i, f) for i, f in enumerate(meta_fields(data.names))}
    positions: list[int] = []
    for g in given[n:]:
        if g.name not in by_name:
            raise ReadSchemaError(f"column {g.name!r} is neither one of the log's data columns ({expected}) "
                              f"nor a metadata column ({', '.join(f.name for _, f in by_name.values())})")
        i, f = by_name[g.name]
        if g.type != f.type:
            raise ReadSchemaError(f"metadata column {g.name!r} is {f.type}, not {g.type}")
        if i in positions:
            raise ReadSchemaError(f"metadata column {g.name!r} is given twice")
        positions.append(i)
    # The user's schema itself: Spark checks batches against it.
    return ReadColumns(user, n, tuple(positions), headers, event_time)


def _check_headers_type(typ: pa.DataType) -> None:
    value = typ.value_type if pa.types.is_list(typ) else None
    if value is None or not pa.types.is_struct(value) or [(f.name, f.type) for f in value] != \
            [(f.name, f.type) for f in HEADER_FIELDS]:
        raise ReadSchemaError(f"column 'headers' is {typ}, not array<struct<key: string, value: binary>>")
