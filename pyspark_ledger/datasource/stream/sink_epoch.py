"""The streaming sink's hold on its log's writer epoch: one writer per log, whoever writes.

A streaming query is one of the log's writers. A run of the query (a start or a restart: Spark's
run id, which every micro-batch task reads from its local properties and returns with its
ledger, streaming.spark_run_id) takes the log over on its first commit
(pyspark_ledger.log.takeover: bump the epoch, fence and close every unsealed ledger) and records
what it took at /sink-epochs/<log>/<query id>: {"run", "epoch", "fromSeq"}. Every later commit of
the same run reads that record back (Spark runs each commit in a fresh Python process, so nothing
survives in memory) and appends only if the log's epoch is still the run's. A LogWriter, a batch
job or another run that took the log over since makes the commit fail with StaleEpochError, and
nothing of that commit is visible. A restarted query (a new run) takes the log over again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from metadata import BadVersionError, NodeExistsError
from metadata.context import now_ms
from metadata.paths import sink_epoch_path
from pyspark_ledger.datasource.errors import LedgerSourceError
from pyspark_ledger.log.takeover import take_over

if TYPE_CHECKING:
    from pyspark_ledger.client import LedgerClient

@dataclass(frozen=True)
class QueryEpoch:
    """What a run of a streaming query holds: the log's writer epoch it took, and the log's
    next_seq at that moment (every ledger it appends has seq >= from_seq)."""

    run_id: str
    epoch: int
    from_seq: int


def read_query_epoch(client: LedgerClient, log_name: str, query_id: str) -> QueryEpoch | None:
    got = client.store.get(sink_epoch_path(log_name, query_id))
    if got is None:
        return None
    try:
        d = json.loads(got.value)
        return QueryEpoch(str(d["run"]), int(d["epoch"]), int(d["fromSeq"]))
    except (ValueError, KeyError, TypeError):
        return None  # unreadable: the run takes the log over again


def hold_query_epoch(client: LedgerClient, log_name: str, query_id: str, run_id: str,
                     password: bytes) -> QueryEpoch:
    """The epoch this run of the query holds: taken over on the run's first commit, read back on
    the later ones. Whether it is still the log's epoch is checked inside the commit's CAS."""
    path = sink_epoch_path(log_name, query_id)
    got = client.store.get(path)
    held = read_query_epoch(client, log_name, query_id) if got is not None else None
    if held is not None and held.run_id == run_id:
        return held
    taken = take_over(client, log_name, password, writer=f"streaming query {query_id} (run {run_id})")
    mine = QueryEpoch(run_id, taken.epoch, taken.from_seq)
    value = json.dumps({"run": run_id, "epoch": mine.epoch, "fromSeq": mine.from_seq, "timeMs": now_ms()}).encode()
    try:
        if got is None:
            client.store.create(path, value)
        else:
            client.store.compare_and_set(path, value, got.version)
    except (NodeExistsError, BadVersionError):
        raise LedgerSourceError(f"streaming query {query_id} on log {log_name!r}: another run of the same query "
                                "committed at the same time; only one run of a query may be active") from None
    return mine
