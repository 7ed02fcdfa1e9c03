"""Spark's `format("ledger")`: a PySpark Python Data Source over named logs and ledgers.

The layer is thin, in four parts (docs/architecture.md, "The Spark room"): options/ turns
options into typed values; read/ plans input partitions from log and ledger metadata and reads
ranges on executors straight from bookies into Arrow batches; write/ writes one ledger per task
attempt and commits a job's ledgers to the log in one compare-and-set; stream/ is structured
streaming's source and sink over those. source.py (and stream/source.py) wrap them in Spark's
classes: only they import pyspark; `pyspark_ledger.DefaultSource` loads source.py lazily so
importing the client never pulls in Spark.
"""

from __future__ import annotations

from typing import Any

SOURCE_NAME = "ledger"


def __getattr__(name: str) -> Any:
    if name in ("DefaultSource", "LedgerDataSource"):
        from pyspark_ledger.datasource import source

        return getattr(source, name)
    raise AttributeError(f"module 'pyspark_ledger.datasource' has no attribute {name!r}")
