"""pyspark-ledger: a replicated, durable log (BookKeeper's protocol) that Spark reads and writes natively.

This module must import cheaply and without pyspark: Spark imports every top-level `pyspark_*`
module to look for a DefaultSource, and plain Python producers use the client with no JVM.
Public names are loaded on first use.
"""

from __future__ import annotations

import os
from typing import Any

__version__ = "0.2.0.dev0"  # = bookie.proto.versions.RELEASE (not imported here: this module stays cheap)

# gRPC's fork handlers (on by default in grpcio) restart its poller thread in every forked child.
# A child that then execs, as pyspark starts its JVM (subprocess with preexec_fn: a real fork),
# can abort or hang before exec once Python closes the poller's descriptors (grpc/grpc#43055:
# here about 1 fork in 60 while calls are in flight). The client never uses gRPC in a forked
# child (Spark's Python workers are forked by pyspark's daemon, which holds no channel), so the
# handlers are off unless the application set GRPC_ENABLE_FORK_SUPPORT itself. gRPC reads it
# when it is imported, so it is set here, in the package's first module.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

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
