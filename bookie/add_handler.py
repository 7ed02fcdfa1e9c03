"""One AddRequest -> its AddResults, once every batch is durable (or refused).

Both add transports call this: the gRPC Add stream (bookie.service) and the plain-TCP add
listener (bookie.add_listener). The calling thread reads, submits and answers: at low load the
journal write runs inline in that thread (no hand-off at all), under load the journal thread
commits the batches of all streams in shared groups while this one waits. Clients keep one
request in flight per connection and coalesce whatever accumulates meanwhile into the next, so
batches grow with load (see pyspark_ledger.bookie_client).
"""

from __future__ import annotations

import logging
import threading
import time

from bookie.metrics import Metrics
from bookie.proto import bookie_pb2 as pb
from bookie.status import Status
from bookie.storage import BookieStorage

log = logging.getLogger(__name__)

MASTER_KEY_BYTES_MAX = 1024
# How long an add request waits for its batches to become durable before they are answered
# TIMEOUT (a stalled disk; the writer then replaces this bookie).
ADD_DURABLE_TIMEOUT_S = 30.0


def ledger_key(ref: pb.LedgerRef) -> tuple[int, int]:
    return (ref.scope_id, ref.ledger_id)


class AddHandler:
    def __init__(self, storage: BookieStorage, metrics: Metrics):
        self.storage = storage
        self.metrics = metrics

    def handle(self, request: pb.AddRequest) -> list[pb.AddResult]:
        """The results of every batch of `request`, in its order, once all are durable or refused
        (at most ADD_DURABLE_TIMEOUT_S: then the stragglers are answered TIMEOUT)."""
        batches = request.batches
        if len(batches) == 1:
            return [self._handle_lone(batches[0])]
        results: list[pb.AddResult | None] = [None] * len(batches)
        queued = [False] * len(batches)  # submitted without an answer yet: completed by the journal thread
        waiting = [0]
        done = threading.Condition()

        def complete(i: int, started: float, nbytes: int, count: int, status: Status, message: str = "") -> None:
            self.metrics.record_add(status == Status.OK, count, nbytes, time.monotonic() - started)
            result = pb.AddResult(request_id=batches[i].request_id, status=int(status), message=message)
            with done:  # storage answers in this thread (inline write, refusal) or the journal's
                results[i] = result
                if queued[i]:
                    waiting[0] -= 1
                    if waiting[0] == 0:
                        done.notify()

        # Several batches share one group commit (none is journaled inline).
        for i, batch in enumerate(batches):
            started = time.monotonic()
            n = len(batch.entry_ids)
            malformed = _malformed(batch)
            if malformed is not None:
                complete(i, started, 0, 0, Status.INVALID_REQUEST, malformed)
                continue
            nbytes = sum(len(e) for e in batch.entries)
            try:
                self.storage.add_batch(
                    ledger_key(batch.ledger), batch.master_key, list(zip(batch.entry_ids, batch.lacs, batch.entries)),
                    batch.recovery,
                    lambda status, i=i, started=started, nbytes=nbytes, n=n: complete(i, started, nbytes, n, Status(status)),
                    allow_inline=False,
                )
            except Exception as exc:  # noqa: BLE001 - the stream must survive one bad batch
                log.exception("add batch failed ledger=%s", ledger_key(batch.ledger))
                complete(i, started, nbytes, n, Status.INTERNAL_ERROR, str(exc))
            with done:
                if results[i] is None:
                    queued[i] = True
                    waiting[0] += 1
        with done:
            if not done.wait_for(lambda: waiting[0] == 0, timeout=ADD_DURABLE_TIMEOUT_S):
                log.warning("add request not durable in time batches=%d pending=%d", len(batches), waiting[0])
            return [r if r is not None else pb.AddResult(request_id=b.request_id, status=int(Status.TIMEOUT),
                                                         message=f"not durable within {ADD_DURABLE_TIMEOUT_S:g} s")
                    for r, b in zip(results, batches)]

    def _handle_lone(self, batch: pb.AddBatch) -> pb.AddResult:
        """A request of one batch (every request at low load): journaled inline when the journal
        is idle, so usually answered in this thread without any waiting or hand-off."""
        started = time.monotonic()
        n = len(batch.entry_ids)
        malformed = _malformed(batch)
        if malformed is not None:
            self.metrics.record_add(False, 0, 0, 0.0)
            return pb.AddResult(request_id=batch.request_id, status=int(Status.INVALID_REQUEST), message=malformed)
        nbytes = sum(map(len, batch.entries))
        outcome: list[Status] = []
        answered = threading.Lock()
        answered.acquire()  # released by the storage's callback, in this thread or the journal's

        def on_done(status: Status) -> None:
            outcome.append(status)
            answered.release()

        try:
            self.storage.add_batch(ledger_key(batch.ledger), batch.master_key,
                                   list(zip(batch.entry_ids, batch.lacs, batch.entries)), batch.recovery, on_done)
        except Exception as exc:  # noqa: BLE001 - the stream must survive one bad batch
            log.exception("add batch failed ledger=%s", ledger_key(batch.ledger))
            self.metrics.record_add(False, n, nbytes, 0.0)
            return pb.AddResult(request_id=batch.request_id, status=int(Status.INTERNAL_ERROR), message=str(exc))
        if not answered.acquire(timeout=ADD_DURABLE_TIMEOUT_S):
            log.warning("add request not durable in time batches=1 pending=1")
            self.metrics.record_add(False, n, nbytes, 0.0)
            return pb.AddResult(request_id=batch.request_id, status=int(Status.TIMEOUT),
                                message=f"not durable within {ADD_DURABLE_TIMEOUT_S:g} s")
        status = Status(outcome[0])
        self.metrics.record_add(status == Status.OK, n, nbytes, time.monotonic() - started)
        return pb.AddResult(request_id=batch.request_id, status=int(status))


def _malformed(batch: pb.AddBatch) -> str | None:
    """Why a batch cannot be handed to storage at all (answered INVALID_REQUEST), or None."""
    n = len(batch.entry_ids)
    if n == 0 or len(batch.lacs) != n or len(batch.entries) != n:
        return "an add batch needs equally many entry ids, lacs and entries (at least one)"
    if len(batch.master_key) > MASTER_KEY_BYTES_MAX:
        return "master key too long"
    return None
