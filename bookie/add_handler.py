"""One AddRequest -> its AddResults, once every batch is durable (or refused).

Both add transports call this: the gRPC Add stream (bookie.service) and the plain-TCP add
listener (bookie.add_listener). The calling thread reads, submits and answers: at low load the
journal write runs inline in that thread (no hand-off at all), under load the journal thread
commits the batches of all streams in shared groups while this one waits. Clients keep one
request in flight per connection and coalesce whatever accumulates meanwhile into the next, so
batches grow with load (see pyspark_ledger.transport.bookie_client).

A batch is either per-entry (`entries`, wire version 1) or a run (wire version 2: `run_lengths`
and one `run_body` holding the entries end to end; docs/add-transport.md). A run is cut into its
entries as views of the body, never copied one by one. A run may be refused from an entry on: an
entry over the size limit is answered TOO_LARGE with `stored_count` the entries before it, which
are stored (the writer acknowledges those and fails the rest: its LAC never passes the refusal).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from itertools import accumulate
from typing import TYPE_CHECKING, NamedTuple

from bookie.metrics import Metrics
from bookie.proto import bookie_pb2 as pb
from bookie.proto.wire import encode_varint
from bookie.status import Status
from bookie.storage import BookieStorage
from bookie.storage.errors import ensure

if TYPE_CHECKING:
    from bookie.auth import AuthRefusals
    from bookie.ledger_owner import LedgerOwners

log = logging.getLogger(__name__)

MASTER_KEY_BYTES_MAX = 1024
# How long an add request waits for its batches to become durable before they are answered
# TIMEOUT (a stalled disk; the writer then replaces this bookie).
ADD_DURABLE_TIMEOUT_S = 30.0
# The storage's default entry size limit (bookie.config's max_entry_size_bytes), for handlers made
# without the configured one.
ENTRY_BYTES_MAX_DEFAULT = 5 * 2**20


def ledger_key(ref: pb.LedgerRef) -> tuple[int, int]:
    return (ref.scope_id, ref.ledger_id)


class AddOutcome(NamedTuple):
    """One batch's answer (an AddResult's fields)."""

    request_id: int
    status: Status
    message: str
    stored: int = 0  # on a failure: how many leading entries are durable all the same (runs only)


class _Submitted:
    """One batch handed to storage: its answer arrives through `on_done`, in the handler's own
    thread (an inline write or a refusal) or the journal thread's; `outcome` waits for it."""

    __slots__ = ("batch", "entries", "nbytes", "started", "status", "message", "_answered", "refused_from",
                 "refusal")

    def __init__(self, batch: pb.AddBatch):
        self.batch = batch
        self.entries = len(batch.entry_ids)
        self.refused_from: int | None = None  # a run stored only up to this entry (then `refusal`)
        self.refusal = (Status.OK, "")
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

    def outcome(self, deadline: float) -> AddOutcome:
        if not self._answered.acquire(timeout=max(0.0, deadline - time.monotonic())):
            self.status, self.message = Status.TIMEOUT, f"not durable within {ADD_DURABLE_TIMEOUT_S:g} s"
        if self.refused_from is not None and self.status == Status.OK:
            # The prefix before the refused entry is durable: say so, and refuse the rest.
            return AddOutcome(self.batch.request_id, self.refusal[0], self.refusal[1], self.refused_from)
        return AddOutcome(self.batch.request_id, self.status, self.message)


class AddHandler:
    def __init__(self, storage: BookieStorage, metrics: Metrics, refusals: AuthRefusals | None = None,
                 owners: LedgerOwners | None = None, entry_bytes_max: int = ENTRY_BYTES_MAX_DEFAULT):
        self.storage = storage
        self.entry_bytes_max = entry_bytes_max  # the storage's limit: a run is refused from its first entry over it
        self.metrics = metrics
        self.refusals = refusals  # counts the adds storage refused for a wrong master key
        self.owners = owners  # the first key of a ledger storage has not seen (bookie/ledger_owner.py)

    def handle(self, request: pb.AddRequest, run_bodies: Sequence[memoryview | None] = ()) -> list[AddOutcome]:
        """The outcome of every batch of `request`, in its order, once all are durable or
        refused (at most ADD_DURABLE_TIMEOUT_S: then the stragglers are answered TIMEOUT).
        Metrics are recorded before returning, so an acknowledged add is already counted.
        `run_bodies`, when given, has each batch's run body as a view of the frame it arrived in
        (bookie.add_runs; None: the batch's own field), so a run is never copied out of it."""
        batches = request.batches
        ensure(not run_bodies or len(run_bodies) == len(batches), "one run body (or None) per batch")
        bodies = run_bodies or [None] * len(batches)
        # A lone batch (every request at low load) may be journaled inline, in this thread, with
        # no hand-off at all; the batches of a larger request share one group commit instead.
        allow_inline = len(batches) == 1
        submitted = [self._submit(b, allow_inline, body) for b, body in zip(batches, bodies, strict=True)]
        deadline = time.monotonic() + ADD_DURABLE_TIMEOUT_S
        outcomes = [_explained(s.outcome(deadline), s.batch) for s in submitted]
        self._record(submitted)
        return outcomes

    def _record(self, submitted: list[_Submitted]) -> None:
        now = time.monotonic()
        late = 0
        for s in submitted:
            self.metrics.record_add(s.status == Status.OK, s.entries, s.nbytes, now - s.started)
            late += s.status == Status.TIMEOUT
            if s.status == Status.UNAUTHORIZED and self.refusals is not None:
                self.refusals.count("Add")
        if late:
            log.warning("add request not durable in time batches=%d pending=%d", len(submitted), late)

    def _submit(self, batch: pb.AddBatch, allow_inline: bool, body: memoryview | None) -> _Submitted:
        s = _Submitted(batch)
        # Read once: each read of a bytes field is a fresh copy of it.
        run_body = memoryview(batch.run_body) if body is None and batch.run_lengths else body
        malformed = _malformed(batch, len(run_body) if run_body is not None else 0)
        if malformed is not None:
            s.answer(Status.INVALID_REQUEST, malformed)
            return s
        entries = self._entries(batch, s, run_body)
        if not entries:
            return s  # refused from its first entry
        ledger = ledger_key(batch.ledger)
        if self.owners is not None:
            refused = self.owners.first_key_refusal(self.storage.stored_master_key(ledger), ledger,
                                                    batch.master_key, "Add")
            if refused is not None:  # an UNAUTHORIZED answer is counted with storage's refusals below
                s.answer(refused.status, refused.message)
                return s
        try:
            self.storage.add_batch(ledger, batch.master_key, entries, batch.recovery, s.on_done,
                                   allow_inline=allow_inline)
        except Exception as exc:
            log.exception("add batch failed ledger=%s", ledger)
            s.answer(Status.INTERNAL_ERROR, str(exc))
        return s


    def _entries(self, batch: pb.AddBatch, s: _Submitted,
                 run_body: memoryview | None) -> list[tuple[int, int, bytes | memoryview]]:
        """The batch's (entry id, lac, data) for storage, counting its bytes into `s`. A run's
        entries are views of its body, cut before its first entry over the size limit (then `s`
        remembers the refusal; nothing at all when the first entry is over: `s` is answered)."""
        if not batch.run_lengths or run_body is None:
            s.nbytes = sum(map(len, batch.entries))
            return list(zip(batch.entry_ids, batch.lacs, batch.entries))
        lengths = batch.run_lengths
        limit = self.entry_bytes_max
        count = len(lengths)
        if max(lengths) > limit:
            count = next(i for i, n in enumerate(lengths) if n > limit)
            s.refused_from = s.entries = count  # the metrics count what is stored
            s.refusal = (Status.TOO_LARGE, f"entry {batch.entry_ids[count]} is {lengths[count]} bytes, "
                                           f"over this bookie's limit of {limit}")
            if count == 0:
                s.answer(*s.refusal)
                return []
        body = run_body
        ends = list(accumulate(lengths[:count]))
        s.nbytes = ends[-1]
        starts = [0, *ends[:-1]]
        return list(zip(batch.entry_ids[:count], batch.lacs[:count], map(body.__getitem__, map(slice, starts, ends))))


def encode_add_response(outcomes: list[AddOutcome]) -> bytes:
    """A serialized AddResponse, byte for byte what protobuf writes (proto3: zero and empty
    fields left out), built without message objects: this is every add's answer."""
    out = bytearray()
    for request_id, status, message, stored in outcomes:
        body = b"\x08" + encode_varint(request_id) if request_id else b""
        if status:
            body += b"\x10" + encode_varint(int(status))
        if message:
            text = message.encode()
            body += b"\x1a" + encode_varint(len(text)) + text
        if stored:
            body += b"\x20" + encode_varint(stored)
        out += b"\x0a" + encode_varint(len(body)) + body
    return bytes(out)


def _explained(outcome: AddOutcome, batch: pb.AddBatch) -> AddOutcome:
    """A key refusal says which operation on which ledger (never the key)."""
    if outcome.status != Status.UNAUTHORIZED or outcome.message:
        return outcome
    ref = batch.ledger
    return outcome._replace(message=f"Add refused for ledger {ref.scope_id}:{ref.ledger_id}: "
                                    "wrong master key (password)")


def _malformed(batch: pb.AddBatch, run_body_bytes: int) -> str | None:
    """Why a batch cannot be handed to storage at all (answered INVALID_REQUEST), or None."""
    n = len(batch.entry_ids)
    if batch.run_lengths:
        if batch.entries or len(batch.lacs) != n or len(batch.run_lengths) != n:
            return "an add run needs equally many entry ids, lacs and run lengths, and no separate entries"
        if sum(batch.run_lengths) != run_body_bytes:
            return f"an add run's lengths add up to {sum(batch.run_lengths)} bytes, its body has {run_body_bytes}"
    elif n == 0 or len(batch.lacs) != n or len(batch.entries) != n:
        return "an add batch needs equally many entry ids, lacs and entries (at least one)"
    if len(batch.master_key) > MASTER_KEY_BYTES_MAX:
        return "master key too long"
    return None
