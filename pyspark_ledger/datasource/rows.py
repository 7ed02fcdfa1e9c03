"""The columns every row read carries, besides its data: where it is in its log, and when.

    log        string     the log's name (null when one ledger is read on its own, option ledger)
    seq        bigint     the ledger's sequence number in the log (null likewise)
    ledger     string     the ledger's qualified name (32 hex digits)
    entry      bigint     the entry id in the ledger
    index      int        the row within the entry (Arrow entries hold many rows; 0 for raw)
    timestamp  timestamp  when the ledger joined the log (read/planning.py: the granularity)

{"seq", "ledger", "entry", "index"} of a row is its position (options/positions.py); a written column of
the same name keeps its name and the metadata column gets a leading underscore (`_timestamp`).
No pyspark here: source.py turns the Arrow schema into Spark's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

META_TYPES: tuple[tuple[str, pa.DataType], ...] = (
    ("log", pa.string()),
    ("seq", pa.int64()),
    ("ledger", pa.string()),
    ("entry", pa.int64()),
    ("index", pa.int32()),
    ("timestamp", pa.timestamp("us", tz="UTC")),  # what Spark's TimestampType is in Arrow
)
META_NAMES = tuple(name for name, _ in META_TYPES)
PAYLOAD_FIELD = pa.field("payload", pa.binary())


def meta_fields(taken: Iterable[str] = ()) -> list[pa.Field]:
    """The metadata fields, each renamed with leading underscores while a data column has its name."""
    used = set(taken)
    out = []
    for name, typ in META_TYPES:
        while name in used:
            name = "_" + name
        used.add(name)
        out.append(pa.field(name, typ))
    return out


def raw_read_schema() -> pa.Schema:
    """A raw log as read: the payload, then the metadata columns."""
    return pa.schema([PAYLOAD_FIELD, *meta_fields(["payload"])])


def arrow_read_schema(data_schema: pa.Schema) -> pa.Schema:
    """An Arrow log as read: the written columns, then the metadata columns."""
    return pa.schema([*data_schema, *meta_fields(data_schema.names)])


@dataclass(frozen=True, slots=True)
class RowPlace:
    """What the rows of one planned range share: their log, ledger and time."""

    log: str | None  # None: a single ledger read outside any log
    seq: int | None
    ledger: str  # qualified name
    timestamp_ms: int


def meta_arrays(place: RowPlace, entries: np.ndarray, index: np.ndarray) -> list[pa.Array]:
    """The metadata columns of n rows: entries[i] and index[i] per row, the rest constant."""
    n = len(entries)
    log = pa.nulls(n, pa.string()) if place.log is None else pa.repeat(pa.scalar(place.log, pa.string()), n)
    seq = pa.nulls(n, pa.int64()) if place.seq is None else pa.array(np.full(n, place.seq, dtype=np.int64))
    stamp = pa.array(np.full(n, place.timestamp_ms * 1000, dtype=np.int64)).cast(pa.timestamp("us", tz="UTC"))
    return [log, seq, pa.repeat(pa.scalar(place.ledger, pa.string()), n), pa.array(entries, pa.int64()),
            pa.array(index, pa.int32()), stamp]


def raw_meta(place: RowPlace, first_entry_id: int, n: int) -> list[pa.Array]:
    """Raw entries first_entry_id.. (one row each, index 0)."""
    return meta_arrays(place, np.arange(first_entry_id, first_entry_id + n, dtype=np.int64), np.zeros(n, dtype=np.int32))


def entry_meta(place: RowPlace, entry_id: int, first_index: int, n: int) -> list[pa.Array]:
    """n rows of one Arrow entry, the first being row `first_index` of the entry."""
    return meta_arrays(place, np.full(n, entry_id, dtype=np.int64), np.arange(first_index, first_index + n, dtype=np.int32))
