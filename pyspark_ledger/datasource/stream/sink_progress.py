"""What the streaming sink wrote, per query: rows, entries and bytes, in the metadata store.

Spark's progress shows a Python sink's rows (`progress.sink.numOutputRows`, counted by Spark as
the rows handed to the writer) but no bytes, and a Python data source cannot add sink metrics.
So every commit that appends a micro-batch records, after its compare-and-set, at
/sink-progress/<log>/<query id>:

    {"batchId": 7, "rows": 1200, "entries": 3, "bytes": 123456, "ledgers": 2,
     "totalRows": ..., "totalEntries": ..., "totalBytes": ..., "batches": 8, "timeMs": ...}

`bytes` are the payload bytes of the batch's sealed ledgers (Arrow entries after compression),
as the log's metadata counts them. A replayed batch (already committed) adds nothing. The
totals are a running sum kept by the commits: a driver killed between a commit's
compare-and-set and this record leaves that one batch out of them. read_sink_progress() reads
it back (the query id is `query.id`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from metadata import BadVersionError, NodeExistsError
from metadata.context import now_ms
from metadata.paths import sink_progress_path

if TYPE_CHECKING:
    from pyspark_ledger.client import LedgerClient

WRITE_ATTEMPTS = 3  # a concurrent writer of the same node means two runs of one query: give up after a few


@dataclass(frozen=True, slots=True)
class SinkProgress:
    batch_id: int
    rows: int
    entries: int
    size_bytes: int
    ledgers: int
    total_rows: int
    total_entries: int
    total_bytes: int
    batches: int
    time_ms: int

    def to_json(self) -> bytes:
        return json.dumps({"batchId": self.batch_id, "rows": self.rows, "entries": self.entries, "bytes": self.size_bytes,
                           "ledgers": self.ledgers, "totalRows": self.total_rows, "totalEntries": self.total_entries,
                           "totalBytes": self.total_bytes, "batches": self.batches, "timeMs": self.time_ms}).encode()

    @classmethod
    def from_json(cls, data: bytes) -> SinkProgress | None:
        try:
            d = json.loads(data)
            return cls(int(d["batchId"]), int(d["rows"]), int(d["entries"]), int(d["bytes"]), int(d["ledgers"]),
                       int(d["totalRows"]), int(d["totalEntries"]), int(d["totalBytes"]), int(d["batches"]),
                       int(d["timeMs"]))
        except (ValueError, KeyError, TypeError):
            return None  # unreadable: the next commit starts the totals again


def read_sink_progress(client: LedgerClient, log_name: str, query_id: str) -> SinkProgress | None:
    """The last micro-batch the sink appended to `log_name` for streaming query `query_id`."""
    got = client.store.get(sink_progress_path(log_name, query_id))
    return None if got is None else SinkProgress.from_json(got.value)


def record_batch(client: LedgerClient, log_name: str, query_id: str, batch_id: int, rows: int, entries: int,
                 size: int, ledgers: int) -> SinkProgress | None:
    """Add one appended micro-batch to the query's record; None if it was already counted."""
    path = sink_progress_path(log_name, query_id)
    for _ in range(WRITE_ATTEMPTS):
        got = client.store.get(path)
        before = SinkProgress.from_json(got.value) if got is not None else None
        if before is not None and before.batch_id >= batch_id:
            return None
        base = before or SinkProgress(-1, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        mine = SinkProgress(batch_id, rows, entries, size, ledgers, base.total_rows + rows,
                            base.total_entries + entries, base.total_bytes + size, base.batches + 1, now_ms())
        try:
            if got is None:
                client.store.create(path, mine.to_json())
            else:
                client.store.compare_and_set(path, mine.to_json(), got.version)
            return mine
        except (NodeExistsError, BadVersionError):
            continue
    return None
