"""pyspark-ledger: a replicated, durable log (BookKeeper's protocol) that Spark reads and writes natively.

This module must import cheaply and without pyspark: Spark imports every top-level `pyspark_*`
module to look for a DefaultSource, and plain Python producers use the client with no JVM.
Public names are loaded on first use.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "LedgerClient": "pyspark_ledger.client",
    "WriteHandle": "pyspark_ledger.ledger.write_handle",
    "ReadHandle": "pyspark_ledger.ledger.read_handle",
    "LocalCluster": "pyspark_ledger.testing.local_cluster",
    "LedgerId": "metadata",
    "CreateContext": "metadata",
    "CloseContext": "metadata",
    "QuorumConfig": "metadata",
    "DefaultSource": "pyspark_ledger.datasource.source",  # Spark's format("ledger"); imports pyspark
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pyspark_ledger' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = sorted(_LAZY)
