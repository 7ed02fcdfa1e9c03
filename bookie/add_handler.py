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


class _Submitted:
    """One batch handed to storage: its answer arrives through `on_done`, in the handler's own
    thread (an inline write or a refusal) or the journal thread's; `result` waits for it."""

    __slots__ = ("batch", "entries", "nbytes", "started", "status", "message", "_answered")

    def __init__(self, batch: pb.AddBatch):
        self.batch = batch
        self.entries = len(batch.entry_ids)
        self.nbytes = 0
        self.started = time.monotonic()
        self.status = Status.INTERNAL_ERROR  # set (with message) before the lock is released
        self.message = ""
        self._answered = threading.Lock()
        self._answered.acquire()  # released once, by on_done or answer

    def on_done(self, status: Status) -> None:
        self.answer(Status(status))

    def answer(self, status: Status, message: str = "") -> None:
        self.status, self.message = status, message
        self._answered.release()

    def result(self, deadline: float, metrics: Metrics) -> pb.AddResult:
        if not self._answered.acquire(timeout=max(0.0, deadline - time.monotonic())):
            return pb.AddResult(request_id=self.batch.request_id, status=int(Status.TIMEOUT),
                                message=f"not durable within {ADD_DURABLE_TIMEOUT_S:g} s")
        metrics.record_add(self.status == Status.OK, self.entries, self.nbytes, time.monotonic() - self.started)
        return pb.AddResult(request_id=self.batch.request_id, status=int(self.status), message=self.message)


class AddHandler:
    def __init__(self, storage: BookieStorage, metrics: Metrics):
        self.storage = storage
        self.metrics = metrics

    def handle(self, request: pb.AddRequest) -> list[pb.AddResult]:
        """The results of every batch of `request`, in its order, once all are durable or refused
        (at most ADD_DURABLE_TIMEOUT_S: then the stragglers are answered TIMEOUT)."""
        batches = request.batches
        # A lone batch (every request at low load) may be journaled inline, in this thread, with
        # no hand-off at all; the batches of a larger request share one group commit instead.
        allow_inline = len(batches) == 1
        submitted = [self._submit(b, allow_inline) for b in batches]
        deadline = time.monotonic() + ADD_DURABLE_TIMEOUT_S
        results = [s.result(deadline, self.metrics) for s in submitted]
        late = sum(r.status == Status.TIMEOUT for r in results)
        if late:
            log.warning("add request not durable in time batches=%d pending=%d", len(batches), late)
        return results

    def _submit(self, batch: pb.AddBatch, allow_inline: bool) -> _Submitted:
        s = _Submitted(batch)
        malformed = _malformed(batch)
        if malformed is not None:
            s.answer(Status.INVALID_REQUEST, malformed)
            return s
        s.nbytes = sum(map(len, batch.entries))
        try:
            self.storage.add_batch(ledger_key(batch.ledger), batch.master_key,
                                   list(zip(batch.entry_ids, batch.lacs, batch.entries)), batch.recovery,
                                   s.on_done, allow_inline=allow_inline)
        except Exception as exc:  # noqa: BLE001 - the stream must survive one bad batch
            log.exception("add batch failed ledger=%s", ledger_key(batch.ledger))
            s.answer(Status.INTERNAL_ERROR, str(exc))
        return s


def _malformed(batch: pb.AddBatch) -> str | None:
    """Why a batch cannot be handed to storage at all (answered INVALID_REQUEST), or None."""
    n = len(batch.entry_ids)
    if n == 0 or len(batch.lacs) != n or len(batch.entries) != n:
        return "an add batch needs equally many entry ids, lacs and entries (at least one)"
    if len(batch.master_key) > MASTER_KEY_BYTES_MAX:
        return "master key too long"
    return None
