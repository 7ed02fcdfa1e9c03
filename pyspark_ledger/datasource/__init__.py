"""Spark's `format("ledger")`: a PySpark Python Data Source over named logs and ledgers.

The layer is thin: it turns options into a typed value (options.py), plans input partitions
from log and ledger metadata (planning.py), reads ranges on executors straight from bookies
into Arrow batches (reader.py, codec.py), writes one ledger per task attempt and commits a
job's ledgers to the log in one compare-and-set (writer.py). Only source.py imports pyspark;
`pyspark_ledger.DefaultSource` loads it lazily so importing the client never pulls in Spark.
"""

from __future__ import annotations

from typing import Any

SOURCE_NAME = "ledger"


def __getattr__(name: str) -> Any:
    if name in ("DefaultSource", "LedgerDataSource"):
        from pyspark_ledger.datasource import source

        return getattr(source, name)
    raise AttributeError(f"module 'pyspark_ledger.datasource' has no attribute {name!r}")
