"""Where a ledger's offloaded file lives in the store (docs/tiered-storage.md, "Layout").

    <log>/instance=<log creation ms>/<seq, 20 digits>-<ledger, 32 hex digits>-<attempt>.parquet

The instance is the log record's creation time: a log deleted and created again under the same
name gets a new instance directory, so its files never mix with the old log's. The directory is
named as a Hive partition, so `spark.read.parquet("<store>/<log>")` finds the files (Spark does
not descend into other subdirectories) and gives each row an `instance` column. `attempt` is
random per offload attempt, so two offloaders (say, before and after a leader change) never write
the same object; only the attempt the ledger's record names is ever read.
"""

from __future__ import annotations

import uuid

from metadata.ids import LedgerId

FILE_SUFFIX = ".parquet"


def new_attempt() -> str:
    return uuid.uuid4().hex


def instance_dir(log: str, log_ctime_ms: int) -> str:
    return f"{log}/instance={log_ctime_ms}"


def ledger_file(log: str, log_ctime_ms: int, seq: int, ledger_id: LedgerId, attempt: str) -> str:
    return f"{instance_dir(log, log_ctime_ms)}/{seq:020d}-{ledger_id.qualified_name}-{attempt}{FILE_SUFFIX}"
