"""The Spark side of a read's schema: the data columns of what is read (as Spark types) and the
read's columns for an output schema Spark hands over (ours, or one given with
spark.read.schema(...): read/columns.py checks it). Used by the batch reader (source.py) and the
stream reader (stream/source.py) alike. Imports pyspark's type conversions only (no JVM).
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from pyspark_ledger.datasource.errors import LedgerSourceError
from pyspark_ledger.datasource.options.source_options import LedgerSourceOptions
from pyspark_ledger.datasource.read.columns import ReadColumns, user_columns
from pyspark_ledger.datasource.read.planning import SourceShape, first_entry_range
from pyspark_ledger.datasource.read.reader import arrow_schema_of
from pyspark_ledger.datasource.rows import PAYLOAD_FIELD


def spark_arrow_schema(schema: StructType) -> pa.Schema:
    # Exactly as Spark's Python data source worker derives the batch schema it checks against.
    return to_arrow_schema(schema, timezone="UTC")


def data_schema(client: Any, opts: LedgerSourceOptions, shape: SourceShape) -> StructType:
    """The data columns of what is read: a raw log's payload (a keyed one's key and payload, as
    recorded), an Arrow log's recorded columns, a lone Arrow ledger's from its entry 0."""
    if shape.payload_format == "raw" and shape.schema_json is None:
        return from_arrow_schema(pa.schema([PAYLOAD_FIELD]))
    if shape.schema_json is not None:
        return StructType.fromJson(json.loads(shape.schema_json))
    return from_arrow_schema(_single_ledger_arrow_schema(client, opts))


def read_columns(client: Any, opts: LedgerSourceOptions, schema: StructType, shape: SourceShape) -> ReadColumns:
    """The columns of a read with output `schema` (ours from schema(), or the user's): the log's
    data columns, then metadata columns (read/columns.py checks it and says what does not fit)."""
    return user_columns(spark_arrow_schema(data_schema(client, opts, shape)), spark_arrow_schema(schema),
                        event_time=opts.timestamp_source == "event")


def _single_ledger_arrow_schema(client: Any, opts: LedgerSourceOptions) -> pa.Schema:
    """A lone Arrow ledger records no schema in a log: every entry is a full IPC stream, so
    entry 0 says what the columns are."""
    if opts.ledger is None:
        raise LedgerSourceError("the schema of a single ledger needs option ledger")
    rng = first_entry_range(client, opts)  # read as every entry is read: read/reader.py
    if rng is None:
        raise LedgerSourceError(f"ledger {opts.ledger} is empty: give the schema with spark.read.schema(...)")
    return arrow_schema_of(client, rng, opts.password)
