"""One pass over the offload file queue: delete the objects nobody will read, then their entries.

Each entry's fate is queue_verdict.verdict's, from the ledger's metadata as it is now, so a pass
may crash anywhere and the next one decides again (objects are deleted before their entry, and
deleting a missing object is no error)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from metadata.errors import MetadataError
from metadata.ledger import LedgerMetadata
from metadata.offload_queue import QueuedAttempt, dequeue, queued
from metadata.offload_record import WRITING, offload_record, with_record
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.offload.offloaded_reads import store_for
from pyspark_ledger.offload.queue_verdict import Verdict, verdict

log = logging.getLogger(__name__)

QUEUE_PASS_ENTRIES_MAX = 10_000


@dataclass
class QueuePassResult:
    kept: int = 0
    deleted_objects: int = 0
    dequeued: int = 0
    failed: int = 0


def queue_pass(client: LedgerClient, stale_ms: int, limit: int = QUEUE_PASS_ENTRIES_MAX) -> QueuePassResult:
    result = QueuePassResult()
    for q in queued(client.store, limit):
        try:
            _one(client, q, stale_ms, result)
        except (LedgerError, MetadataError) as exc:  # this entry stays queued: the next pass decides again
            result.failed += 1
            log.info("offload queue entry left for the next pass attempt=%s ledger=%s error=%s", q.attempt,
                     q.ledger_id, exc)
    return result


def _one(client: LedgerClient, q: QueuedAttempt, stale_ms: int, result: QueuePassResult) -> None:
    got = client.ledgers.get(q.ledger_id)
    rec = None if got is None else offload_record(got[0])
    v = verdict(q, got is not None, rec, int(time.time() * 1000), stale_ms)
    if v is Verdict.KEEP:
        result.kept += 1
        return
    if v is Verdict.ABANDON:
        def clear(m: LedgerMetadata) -> LedgerMetadata | None:
            r = offload_record(m)
            if r is None or r.attempt != q.attempt or r.state != WRITING:
                raise _Moved(f"ledger {m.ledger_id}: offload record moved on")
            return with_record(m, None)

        try:
            client.ledgers.update(q.ledger_id, clear)
        except _Moved:
            result.kept += 1  # decided again at the next pass, from the new record
            return
    store = store_for(q.store)
    for name in q.files:
        if store.delete(name):
            result.deleted_objects += 1
    dequeue(client.store, q.attempt)
    result.dequeued += 1
    log.info("offloaded objects deleted attempt=%s ledger=%s objects=%d reason=%s", q.attempt, q.ledger_id,
             len(q.files), "ledger gone" if got is None else "attempt not recorded")


class _Moved(LedgerError):
    """The record changed under an ABANDON: leave the entry to the next pass."""
