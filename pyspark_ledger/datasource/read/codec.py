"""Arrow entries -> rows, in bulk: no per-row Python objects on the read path.

Verified payloads (pyspark_ledger/protocol/entry_runs.py, read by pyspark_ledger/ledger/run_reads.py)
become rows. Raw payloads are the `payload` column as they are; Arrow payloads are IPC streams
opened zero-copy, with the metadata columns added (pyspark_ledger/datasource/rows.py): the ones
the read returns (read/columns.py), and none at all when it returns none. Batched raw entries
(entry format 3) are unpacked by read/batch_unpack.py and become rows here too. The write side's packer, which makes
these entries, is pyspark_ledger/datasource/write/packer.py.

No pyspark here (pyarrow, numpy and the client's entry format only).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa

from pyspark_ledger.datasource import keyed_entries
from pyspark_ledger.datasource.read.batch_unpack import RowsBatch
from pyspark_ledger.datasource.read.columns import ReadColumns
from pyspark_ledger.datasource.read.meta_columns import MetaColumns
from pyspark_ledger.datasource.read.time_filter import TimeFilter
from pyspark_ledger.datasource.rows import (
    META_NAMES,
    RowPlace,
    as_headers_type,
    entry_meta,
    meta_arrays,
    no_headers,
    raw_meta,
    raw_read_schema,
    stamp_array,
)
from pyspark_ledger.protocol.arrow_times import append_ms_of

# The columns of a raw log as read (rows.py): a DataFrame read from one can be written back.
RAW_COLUMNS = ("payload", *META_NAMES)
RAW_ARROW_SCHEMA = raw_read_schema()
TIMESTAMP_AT = META_NAMES.index("timestamp")


def all_columns(schema: pa.Schema, columns: ReadColumns | None) -> ReadColumns:
    """`columns`, or (None) the schema's data columns followed by all six metadata columns."""
    if columns is not None:
        return columns
    return ReadColumns(schema, len(schema) - len(META_NAMES), tuple(range(len(META_NAMES))))


# ---- raw logs ----------------------------------------------------------------------------------------


def raw_batch(place: RowPlace, first_entry_id: int, payloads: pa.Array,
              schema: pa.Schema = RAW_ARROW_SCHEMA, *, meta: MetaColumns | None = None,
              columns: ReadColumns | None = None) -> pa.RecordBatch:
    """Raw entries first_entry_id.. as rows: the payload, then where each is (rows.py; from
    `meta`'s cached columns when given). A keyed raw log (its schema has a key before the
    payload) has each entry's key cut off its front."""
    cols = all_columns(schema, columns)
    data = [payloads]
    if cols.data_count == 2:
        try:
            keys, payloads = keyed_entries.unframe(payloads)
        except keyed_entries.KeyFramingError as e:  # name the stored entry, not its place in the run
            log = f"log {place.log!r} " if place.log is not None else ""
            raise keyed_entries.KeyFramingError(
                e.index, e.reason + " (the log records keys, but this entry was appended without the framing, "
                "e.g. by a LogWriter)", where=f"{log}ledger {place.ledger} entry {first_entry_id + e.index}") from None
        data = [keys.cast(schema.field(0).type), payloads]
    where: list[pa.Array] = []
    if cols.meta_positions:
        n = len(payloads)
        where = cols.pick(meta.raw(first_entry_id, n) if meta is not None else raw_meta(place, first_entry_id, n))
    return pa.RecordBatch.from_arrays([*data, *where, *_no_headers(cols, len(payloads))], schema=cols.schema)


def batched_raw_batch(place: RowPlace, rows: RowsBatch, columns: ReadColumns, *,
                      meta: MetaColumns | None = None, times: TimeFilter | None = None) -> pa.RecordBatch:
    """Messages of batched raw entries (read/batch_unpack.py) as rows: the key (a keyed log's;
    the batch's own key column, null where a message has none), the payload, then where each is
    (rows of one entry from `meta`'s cached columns when given). `times`: pushed timestamp
    conditions, applied to each row's time (whether or not the read returns the column)."""
    data = [rows.payloads]
    if columns.data_count == 2:
        keys = rows.keys if rows.keys is not None else pa.nulls(len(rows.payloads), pa.binary())
        data = [keys.cast(columns.schema.field(0).type), rows.payloads]
    where: list[pa.Array] = []
    n = len(rows.payloads)
    shown = rows.times_ms(columns.event_time)  # each message's own time (None: the ledger's)
    if columns.meta_positions:
        if meta is not None and rows.single_entry and n:
            where = meta.entry(int(rows.entries[0]), int(rows.index[0]), n)
        else:
            where = meta_arrays(place, rows.entries, rows.index)
        if shown is not None and TIMESTAMP_AT in columns.meta_positions:
            where = [*where[:TIMESTAMP_AT], stamp_array(shown), *where[TIMESTAMP_AT + 1:]]
        where = columns.pick(where)
    tail: list[pa.Array] = []
    if columns.headers:
        tail = [as_headers_type(rows.headers if rows.headers is not None else no_headers(n), columns.headers_type)]
    batch = pa.RecordBatch.from_arrays([*data, *where, *tail], schema=columns.schema)
    if times:
        mask = times.mask(shown if shown is not None else np.full(n, place.timestamp_ms, dtype=np.int64))
        if mask.false_count:
            batch = batch.filter(mask)
    return batch


def _no_headers(columns: ReadColumns, n: int) -> list[pa.Array]:
    """The headers column of n rows that have none (unbatched entries), when the read has it."""
    return [as_headers_type(no_headers(n), columns.headers_type)] if columns.headers else []


# ---- Arrow logs ---------------------------------------------------------------------------------------


def decode_arrow_entry(payload: pa.Buffer, place: RowPlace, entry_id: int, target: pa.Schema,
                       skip_rows: int = 0, keep_rows: int | None = None, *,
                       meta: MetaColumns | None = None, columns: ReadColumns | None = None,
                       times: TimeFilter | None = None) -> Iterator[pa.RecordBatch]:
    """The record batches of one Arrow entry, with the metadata columns added (rows.py; from
    `meta`'s cached columns when given), in the
    exact target schema (Spark checks it). Only the entry's rows with skip_rows <= index <
    keep_rows (a read that starts or ends inside this entry). Zero-copy unless a column's type
    must be cast."""
    reader = pa.ipc.open_stream(payload)
    entry_ms = append_ms_of(reader.schema, f"entry {entry_id} of ledger {place.ledger}")
    yield from arrow_entry_batches(reader, place, entry_id, target, skip_rows, keep_rows,
                                   meta=meta, columns=columns, entry_ms=entry_ms, times=times)


def arrow_entry_batches(reader: Iterable[pa.RecordBatch], place: RowPlace, entry_id: int, target: pa.Schema,
                        skip_rows: int = 0, keep_rows: int | None = None, *,
                        meta: MetaColumns | None = None, columns: ReadColumns | None = None,
                        entry_ms: int | None = None, times: TimeFilter | None = None) -> Iterator[pa.RecordBatch]:
    """decode_arrow_entry over an entry's record batches however they were read (an IPC stream,
    or an offloaded entry's Parquet row group: pyspark_ledger/offload). `entry_ms`: the entry's
    own append time (protocol/arrow_times.py), every row's timestamp; None (an entry written
    before times): the ledger's join time. `times`: pushed timestamp conditions; the entry's rows
    share one time, so they pass or fail together (whether or not the read returns the column)."""
    if times and not times.keeps(entry_ms if entry_ms is not None else place.timestamp_ms):
        return
    read_cols = all_columns(target, columns)
    data_fields = list(read_cols.schema)[: read_cols.data_count]
    names = [f.name for f in data_fields]
    at = 0  # index in the entry of the batch's first row
    for batch in reader:
        if keep_rows is not None and at >= keep_rows:
            return
        if batch.schema.names != names:
            raise ValueError(f"entry {entry_id} of ledger {place.ledger} holds columns {batch.schema.names}, "
                             f"the log's schema has {names}")
        n = batch.num_rows
        lo, hi = max(0, skip_rows - at), n if keep_rows is None else min(n, keep_rows - at)
        at += n
        if hi <= lo:
            continue
        if (lo, hi) != (0, n):
            batch = batch.slice(lo, hi - lo)
        cols = list(batch.columns)
        for i, f in enumerate(data_fields):
            if cols[i].type != f.type:
                cols[i] = cols[i].cast(f.type)
        where: list[pa.Array] = []
        if read_cols.meta_positions:
            where = meta.entry(entry_id, at - n + lo, hi - lo) if meta is not None else \
                entry_meta(place, entry_id, at - n + lo, hi - lo)
            if entry_ms is not None and TIMESTAMP_AT in read_cols.meta_positions:  # the entry's own time
                where[TIMESTAMP_AT] = stamp_array(np.full(hi - lo, entry_ms, dtype=np.int64))
            where = read_cols.pick(where)
        yield pa.RecordBatch.from_arrays(cols + where + _no_headers(read_cols, hi - lo), schema=read_cols.schema)
