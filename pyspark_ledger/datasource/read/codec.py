"""Arrow entries -> rows, in bulk: no per-row Python objects on the read path.

Verified payloads (pyspark_ledger/protocol/entry_runs.py, read by pyspark_ledger/ledger/run_reads.py)
become rows. Raw payloads are the `payload` column as they are; Arrow payloads are IPC streams
opened zero-copy, with the metadata columns added (pyspark_ledger/datasource/rows.py). The write side's packer, which makes
these entries, is pyspark_ledger/datasource/write/packer.py.

No pyspark here (pyarrow, numpy and the client's entry format only).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa

from pyspark_ledger.datasource import keyed_entries
from pyspark_ledger.datasource.read.meta_columns import MetaColumns
from pyspark_ledger.datasource.rows import META_NAMES, RowPlace, entry_meta, raw_meta, raw_read_schema

# The columns of a raw log as read (rows.py): a DataFrame read from one can be written back.
RAW_COLUMNS = ("payload", *META_NAMES)
RAW_ARROW_SCHEMA = raw_read_schema()


# ---- raw logs ----------------------------------------------------------------------------------------


def raw_batch(place: RowPlace, first_entry_id: int, payloads: pa.Array,
              schema: pa.Schema = RAW_ARROW_SCHEMA, *, meta: MetaColumns | None = None) -> pa.RecordBatch:
    """Raw entries first_entry_id.. as rows: the payload, then where each is (rows.py; from
    `meta`'s cached columns when given). A keyed raw log (its schema has a key before the
    payload) has each entry's key cut off its front."""
    data = [payloads]
    if len(schema) > len(RAW_ARROW_SCHEMA):
        try:
            keys, payloads = keyed_entries.unframe(payloads)
        except keyed_entries.KeyFramingError as e:  # name the stored entry, not its place in the run
            log = f"log {place.log!r} " if place.log is not None else ""
            raise keyed_entries.KeyFramingError(
                e.index, e.reason + " (the log records keys, but this entry was appended without the framing, "
                "e.g. by a LogWriter)", where=f"{log}ledger {place.ledger} entry {first_entry_id + e.index}") from None
        data = [keys.cast(schema.field(0).type), payloads]
    where = meta.raw(first_entry_id, len(payloads)) if meta is not None else raw_meta(place, first_entry_id, len(payloads))
    return pa.RecordBatch.from_arrays([*data, *where], schema=schema)


# ---- Arrow logs ---------------------------------------------------------------------------------------


def decode_arrow_entry(payload: pa.Buffer, place: RowPlace, entry_id: int, target: pa.Schema,
                       skip_rows: int = 0, keep_rows: int | None = None, *,
                       meta: MetaColumns | None = None) -> Iterator[pa.RecordBatch]:
    """The record batches of one Arrow entry, with the metadata columns added (rows.py; from
    `meta`'s cached columns when given), in the
    exact target schema (Spark checks it). Only the entry's rows with skip_rows <= index <
    keep_rows (a read that starts or ends inside this entry). Zero-copy unless a column's type
    must be cast."""
    yield from arrow_entry_batches(pa.ipc.open_stream(payload), place, entry_id, target, skip_rows, keep_rows,
                                   meta=meta)


def arrow_entry_batches(reader: Iterable[pa.RecordBatch], place: RowPlace, entry_id: int, target: pa.Schema,
                        skip_rows: int = 0, keep_rows: int | None = None, *,
                        meta: MetaColumns | None = None) -> Iterator[pa.RecordBatch]:
    """decode_arrow_entry over an entry's record batches however they were read (an IPC stream,
    or an offloaded entry's Parquet row group: pyspark_ledger/offload)."""
    data_fields = list(target)[: len(target) - len(META_NAMES)]
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
        where = meta.entry(entry_id, at - n + lo, hi - lo) if meta is not None else \
            entry_meta(place, entry_id, at - n + lo, hi - lo)
        yield pa.RecordBatch.from_arrays(cols + where, schema=target)
