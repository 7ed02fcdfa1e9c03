"""The LedgerClient every piece of the data source that runs in a Spark Python worker opens.

Shared by the rooms (read/, write/, stream/): planning, reads, writes and commits all start
here. No pyspark here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from metadata import MetadataError
from pyspark_ledger.datasource.errors import LedgerSourceError
from pyspark_ledger.datasource.worker_gc import freeze_worker_heap

if TYPE_CHECKING:
    from pyspark_ledger.client import LedgerClient
    from pyspark_ledger.datasource.options.source_options import LedgerSourceOptions


def open_client(opts: LedgerSourceOptions, *, add_timeout_s: float = 10.0) -> LedgerClient:
    """A client for this job's metadata service; an unreachable store fails within its connect
    timeout with a message naming the option. Every piece of the data source that runs in a Spark
    Python worker (planning, reads, writes, commits) starts here, so this is also where a reused
    worker freezes what its imports made (worker_gc)."""
    from pyspark_ledger.client import LedgerClient

    freeze_worker_heap()

    try:
        return LedgerClient(opts.metadata, add_timeout_s=add_timeout_s)
    except MetadataError as exc:
        raise LedgerSourceError(
            f"cannot reach the metadata service {opts.metadata_uri} (option metadataServiceUri): {exc}; "
            "check the address and that the service is running") from None
