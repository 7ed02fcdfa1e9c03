"""WriteHandle: pipelined, quorum-acknowledged adds to one ledger (reference/bookkeeper-protocol.md).

- Entry e goes to the W bookies starting at index e mod E of its fragment's ensemble.
- An add completes once A bookies of its write set acknowledged it durably AND every lower entry
  has completed: completions are strictly in entry-id order, and the LAC moves only then.
- A sender thread drains new entries and sends one batch per bookie per round (greedy batching:
  under load batches grow, at low load an entry goes out alone at once).
- A bookie error or timeout triggers an ensemble change (protocol.ensemble_change): a new fragment
  from the first unacknowledged entry, written by compare-and-set; unacknowledged entries are
  re-sent to the replacement. From the failure until the new fragment is recorded no add
  completes (protocol.pending_adds), so no entry is acknowledged on the word of a bookie that
  the metadata is about to stop naming for it. If no replacement exists but every write set can still reach A acks, the handle
  carries on without the failed bookie (BookKeeper's delayed ensemble change) and says so.
- FENCED from a bookie or a non-OPEN ledger on a metadata conflict means another client is
  recovering the ledger: every outstanding and later add fails with LedgerFencedError.
- When adds stop, an explicit LAC is sent after `explicit_lac_interval_ms`, so tailing readers see
  the last entries without waiting for the next write.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from operator import attrgetter
from typing import cast

from bookie.status import Status
from metadata import CloseContext, LedgerId, LedgerMetadata
from pyspark_ledger.errors import (
    AddTimeoutError,
    LedgerClosedError,
    LedgerError,
    LedgerFencedError,
    NotEnoughBookiesError,
)
from pyspark_ledger.ledger.context import LedgerContext
from pyspark_ledger.ledger.read_handle import ReadHandle
from pyspark_ledger.ledger.writer_metadata import append_fragment, seal
from pyspark_ledger.protocol.digest import Digest, master_key
from pyspark_ledger.protocol.distribution import byte_bounded_chunks, write_sets
from pyspark_ledger.protocol.ensemble_change import plan_ensemble_change
from pyspark_ledger.protocol.entry_format import entry_encoder, entry_format_of_ledger
from pyspark_ledger.protocol.pending_adds import PendingAdd, PendingAdds
from pyspark_ledger.transport.add_future import AddFuture, AddFutureGroup, complete_run
from pyspark_ledger.transport.add_streams import EncodedAddBatch

log = logging.getLogger(__name__)

# Limits (named, so every queue and wait is bounded).
PENDING_ENTRIES_MAX = 20_000
PENDING_BYTES_MAX = 64 * 2**20
ENTRY_BYTES_MAX = 4 * 2**20
BACKPRESSURE_TIMEOUT_S = 60.0
BATCH_ENTRIES_MAX = 2_000
BATCH_BYTES_MAX = 4 * 2**20
ENSEMBLE_CHANGES_MAX = 32  # consecutive changes without an add completing
CLOSE_DRAIN_TIMEOUT_S = 60.0


class _Pending(PendingAdd):
    """One entry in flight: the protocol's view (id, size, write set, acks) plus what sending
    and completing need."""

    __slots__ = ("data", "lac", "future", "started")

    def __init__(self, entry_id: int, data: bytes, lac: int, size: int, future: AddFuture, bookies: tuple[str, ...],
                 started: float):
        PendingAdd.__init__(self, entry_id, size, bookies)
        self.data = data  # the encoded entry
        self.lac = lac  # the LAC carried in `data`
        self.future = future
        self.started = started  # time.monotonic() at submit, for the client's add latency metric


_data_of = attrgetter("data")


def _batches(entries: list[_Pending]) -> Iterator[list[_Pending]]:
    """Consecutive runs of at most BATCH_ENTRIES_MAX entries and (past the first entry)
    BATCH_BYTES_MAX encoded bytes: one add batch each, well inside a transport message."""
    if not entries:
        return
    if len(entries) <= BATCH_ENTRIES_MAX and sum(map(len, map(_data_of, entries))) <= BATCH_BYTES_MAX:
        yield entries  # the common case, checked with C-level loops
        return
    yield from byte_bounded_chunks(entries, _encoded_size, BATCH_ENTRIES_MAX, BATCH_BYTES_MAX)


def _encoded_size(p: _Pending) -> int:
    return len(p.data)


def _ours(adds: list[PendingAdd]) -> list[_Pending]:
    """PendingAdds hands back the entries it was given, and a WriteHandle gives it only _Pending."""
    return cast(list[_Pending], adds)


class WriteHandle(ReadHandle):
    """A handle that can add entries (and, as in BookKeeper, read what it wrote)."""

    def __init__(self, context: LedgerContext, metadata: LedgerMetadata, version: int, password: bytes):
        super().__init__(context, metadata, version, password)
        self._master_key = master_key(password)
        self._digest = Digest.for_ledger(metadata.digest_type, password)
        self._key = (metadata.ledger_id.scope_id, metadata.ledger_id.id)
        # The format the ledger's creator named (2, or 3 for message batches: protocol.message_batch).
        self._encode = entry_encoder(self._digest, *self._key, entry_format_of_ledger(metadata.custom))
        lock = threading.RLock()
        self._lock = lock  # taken directly on the per-add paths (a Condition's `with` is Python code)
        # Two conditions on one lock: acks wake only add callers waiting for room (or close), not
        # the sender thread, which would otherwise wake for nothing on every ack of every bookie.
        self._cond = threading.Condition(lock)
        self._sender_wake = threading.Condition(lock)
        self._submit_lock = threading.Lock()  # serialises callers: ids, encoding, order of pending adds
        self._sender_idle = False  # the sender waits for work (under the lock): adds must wake it
        self._poller = context.pool.poller
        self._futures = AddFutureGroup(self._poller)  # one condition for all of this handle's adds
        # The protocol's pending adds: acks in, ordered completions and the LAC out, completions
        # held while the ensemble changes. Touched only under self._lock.
        self._adds = PendingAdds(metadata.ack_quorum_size, self._refresh_write_sets())
        self._next_entry_id = 0
        self._length_sent = 0
        self._outbox: list[_Pending] = []  # pending entries with bookies still to send to
        self._failed_bookies: set[str] = set()  # failures not yet handled by an ensemble change
        self._dead_bookies: set[str] = set()  # bookies we carry on without (no replacement)
        self._error: LedgerError | None = None
        self._closing = False
        self._closed = False
        self._close_error: BaseException | None = None  # a failed close stays failed
        self._changes_without_progress = 0
        self._last_lac_sent = -1
        self._last_add_time = time.monotonic()
        lac_ms = context.explicit_lac_interval_ms
        self._explicit_lac_interval_s = lac_ms / 1000 if lac_ms > 0 else None
        self._add_timeout_s = context.add_timeout_s
        self._completing: deque[_Pending] = deque()
        self._completion_lock = threading.Lock()
        self._sender = threading.Thread(target=self._run_sender, name=f"ledger-sender {metadata.ledger_id}", daemon=True)
        self._sender.start()

    # ---- public API ---------------------------------------------------------------------------

    @property
    def ledger_id(self) -> LedgerId:
        return self._metadata.ledger_id

    def last_add_confirmed(self) -> int:
        return self._adds.lac

    @property
    def length(self) -> int:
        return self._adds.length

    def add_entry(self, payload: bytes, timeout_s: float | None = None) -> int:
        """Add one entry and wait until it is acknowledged; returns its entry id."""
        wait_s = timeout_s if timeout_s is not None else BACKPRESSURE_TIMEOUT_S + self._add_timeout_s * 4
        return self.add_entry_async(payload).result(timeout=wait_s)

    def add_entry_async(self, payload: bytes) -> AddFuture:
        """Queue one entry; the future resolves to its entry id once acknowledged (in order)."""
        if not isinstance(payload, (bytes, bytearray, memoryview)):
            raise TypeError(f"payload must be bytes, not {type(payload).__name__}")
        payload = bytes(payload)
        if len(payload) > ENTRY_BYTES_MAX:
            raise LedgerError(f"entry of {len(payload)} bytes exceeds the maximum {ENTRY_BYTES_MAX}")
        fut = AddFuture(self._futures)
        size = len(payload)
        with self._submit_lock:
            eid = self._next_entry_id
            # The LAC read without the lock is at most stale, never ahead: any value <= the true
            # LAC is valid to piggyback. `length` is the ledger's length through this entry.
            lac = self._adds.lac
            length = self._length_sent + size
            data = self._encode(eid, lac, length, payload)
            now = time.monotonic()
            with self._lock:
                deadline = now + BACKPRESSURE_TIMEOUT_S
                adds = self._adds
                while (len(adds.entries) >= PENDING_ENTRIES_MAX or adds.pending_bytes + size > PENDING_BYTES_MAX) \
                        and self._error is None and not self._closing:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise AddTimeoutError(
                            f"ledger {self.ledger_id}: too many adds in flight for {BACKPRESSURE_TIMEOUT_S:g} s")
                    self._cond.wait(left)
                    now = time.monotonic()
                if self._error is not None:
                    raise self._error
                if self._closing or self._closed:
                    raise LedgerClosedError(f"ledger {self.ledger_id} is closed for adds")
                self._next_entry_id = eid + 1
                self._length_sent = length
                p = _Pending(eid, data, lac, size, fut, adds.write_set_for(eid), now)
                adds.append(p)
                # Low load: the sender thread is idle and nothing is queued, so send from this
                # thread and save a thread hop of latency. Under load, queue for the sender,
                # which batches whatever accumulated.
                direct = self._sender_idle and len(adds.entries) == 1 and not self._outbox and not adds.changing
                if not direct:
                    self._outbox.append(p)
                self._last_add_time = now
                if lac > self._last_lac_sent:
                    self._last_lac_sent = lac
                if not direct and self._sender_idle:
                    self._sender_wake.notify()  # a busy sender finds the outbox on its next round
            if direct:
                self._send([p])
        return fut

    def close(self, close_context: CloseContext | None = None) -> None:
        """Wait (bounded) for outstanding adds, then seal the ledger at the last acknowledged entry."""
        with self._cond:
            if self._closed:
                if self._close_error is not None:
                    raise self._close_error  # asking again never turns a failed close into a success
                return
            self._closing = True
            deadline = time.monotonic() + CLOSE_DRAIN_TIMEOUT_S
            while self._adds.entries and self._error is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.1))
            stuck = list(self._adds.entries)
            error = self._error
        if stuck:
            self._fail_all(LedgerClosedError(f"ledger {self.ledger_id} closed with adds still outstanding"))
        try:
            if isinstance(error, LedgerFencedError):
                raise error
            self._seal(close_context)
        except BaseException as exc:
            self._close_error = exc
            raise
        finally:
            with self._cond:
                self._closed = True
                self._notify_all()
            self._sender.join(timeout=5)
        super().close()

    def _close_quietly(self) -> None:
        """Client shutdown: stop the sender without sealing (an open ledger is recovered by its next reader)."""
        with self._cond:
            if not self._closed:
                self._close_error = LedgerClosedError(
                    f"ledger {self.ledger_id} was not sealed: its client shut down (the next reader recovers it)")
            self._closed = True
            self._notify_all()
        self._sender.join(timeout=5)
        ReadHandle.close(self)

    def _seal(self, close_context: CloseContext | None) -> None:
        self._metadata, self._version = seal(self._ctx.ledgers, self._metadata, self._version, self._adds.lac,
                                             self._adds.length, close_context)

    # ---- write sets and sending ---------------------------------------------------------------

    def _refresh_write_sets(self) -> tuple[tuple[str, ...], ...]:
        """Under the lock: the E distinct write sets of the current ensemble (entry e uses set
        e mod E), and their sorted forms, which _send uses to group entries."""
        meta = self._metadata
        sets = write_sets(meta.segments[-1].bookies, meta.write_quorum_size)
        self._sorted_write_sets = {ws: tuple(sorted(ws)) for ws in sets}
        return sets

    def _run_sender(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closed or (self._error is not None and not self._adds.entries):
                        return
                    if self._failed_bookies and self._error is None:
                        break
                    if self._outbox:
                        break
                    if self._lac_due():
                        break
                    self._sender_idle = True
                    self._sender_wake.wait(self._explicit_lac_interval_s or 0.5)
                    self._sender_idle = False
                failed = set(self._failed_bookies)
                outbox, self._outbox = self._outbox, []
            try:
                if failed:
                    self._handle_failures(failed)
                    continue
                if outbox:
                    self._send(outbox)
                elif self._lac_due():
                    self._send_explicit_lac()
            except Exception as exc:
                log.exception("ledger sender failed ledger=%s", self.ledger_id)
                self._set_error(exc if isinstance(exc, LedgerError) else LedgerError(f"sender failed: {exc!r}"))
                return

    def _send(self, outbox: list[_Pending]) -> None:
        # Entries are grouped by the bookies they still need to go to: with E == W (the common
        # case) every entry needs the same ones, so the whole outbox is one group, encoded once
        # per batch and sent to each of its bookies.
        groups: dict[tuple[str, ...], list[_Pending]] = {}
        dead = self._dead_bookies
        with self._lock:
            whole_sets = self._sorted_write_sets
            for p in outbox:
                # The common case, the whole write set, from the cache; anything else computed.
                targets = whole_sets.get(p.bookies) if not p.sent and not p.acked and not dead else None
                if targets is None:
                    targets = tuple(sorted(b for b in p.bookies if b not in p.sent and b not in p.acked and b not in dead))
                if targets:
                    p.sent.extend(targets)
                    group = groups.get(targets)
                    if group is None:
                        groups[targets] = [p]
                    else:
                        group.append(p)
        for targets, entries in groups.items():
            for chunk in _batches(entries):
                ids = tuple(p.entry_id for p in chunk)
                batch = EncodedAddBatch(self._key, self._master_key, [(p.entry_id, p.lac, p.data) for p in chunk])
                # Claim every bookie's stream first, then send to all of them back to back: the
                # bookies start (and their fsyncs overlap) as close together as possible.
                sends = [send for bookie_id in targets if (send := self._submit_batch(bookie_id, ids, batch))]
                for send in sends:
                    send()

    def _submit_batch(self, bookie_id: str, ids: tuple[int, ...], batch: EncodedAddBatch) -> Callable[[], None] | None:
        """Queue `batch` for one bookie; returns the send this thread must run next, if any."""
        if self._ctx.pool.faults.drop("add", bookie_id):
            return None  # lost on the way; the add timeout will notice
        try:
            client = self._ctx.pool.get(bookie_id)
            return client.submit_encoded(batch, lambda status, message: self._on_batch(bookie_id, ids, status, message),
                                         timeout_s=self._add_timeout_s)
        except LedgerError as exc:
            self._on_batch(bookie_id, ids, Status.INTERNAL_ERROR, f"transport: {exc}")
            return None

    def _on_batch(self, bookie_id: str, entry_ids: Sequence[int], status: Status, message: str) -> None:
        """Runs on a transport thread: record acks, complete what became complete, flag failures.
        Lock order: never take _completion_lock while holding _cond (so errors are raised after
        the lock is released)."""
        fenced: LedgerError | None = None
        with self._lock:
            if self._closed:
                return  # shutting down: late answers no longer matter
            if status == Status.OK:
                done = self._adds.on_acks(bookie_id, entry_ids)
                if not done:
                    return  # no entry completed: nobody to wake, nothing to resolve
                self._completing.extend(_ours(done))
                self._changes_without_progress = 0
                if self._cond._waiters:  # type: ignore[attr-defined] # notify_all is Python code: skip it when nobody waits
                    self._cond.notify_all()  # room freed: wake add callers and close, not the sender
            elif status in (Status.FENCED, Status.UNAUTHORIZED):
                fenced = LedgerFencedError(
                    f"ledger {self.ledger_id} was fenced (bookie {bookie_id} answered {status.name}): "
                    "another client is recovering it"
                )
            elif bookie_id not in self._dead_bookies and bookie_id in self._metadata.segments[-1].bookies:
                # Even if these entries already reached A acks elsewhere, a failed ensemble member
                # means later entries would be under-replicated: replace it (ensemble change).
                log.warning("bookie failed an add ledger=%s bookie=%s status=%s %s",
                            self.ledger_id, bookie_id, status.name, message)
                self._adds.on_send_failed(bookie_id, entry_ids)  # and hold completions until the change
                self._failed_bookies.add(bookie_id)
            if status != Status.OK:
                self._notify_all()
        if fenced is not None:
            self._set_error(fenced)
        self._drain_completions()

    def _drain_completions(self) -> None:
        # One thread at a time resolves futures, FIFO, so callbacks fire in entry-id order.
        with self._completion_lock:
            while True:
                with self._lock:
                    if not self._completing:
                        return
                    run = list(self._completing)
                    self._completing.clear()
                self._ctx.metrics.adds_completed(run)  # per run, not per entry; counted before anyone sees the ack
                complete_run(self._futures, run)
                self._poller.wake()  # a caller reading in another thread may wait for one of these

    # ---- failures and ensemble changes --------------------------------------------------------

    def _handle_failures(self, failed: set[str]) -> None:
        """Sender thread: replace failed bookies of the current fragment (protocol.ensemble_change).
        Completions stay held (PendingAdds) from the failure until the new write sets are known."""
        meta = self._metadata
        current = meta.segments[-1].bookies
        for b in failed:
            self._ctx.pool.quarantine(b)
        with self._cond:
            first_unacked = self._adds.begin_change()
            if not any(b in current for b in failed) or (self._closing and not self._adds.entries):
                # Not our ensemble, or nothing left to write: no ensemble change needed.
                self._failed_bookies -= failed
                self._end_change(None)
                return
            self._changes_without_progress += 1
            stuck = self._changes_without_progress > ENSEMBLE_CHANGES_MAX
            dead = frozenset(self._dead_bookies)
        if stuck:
            self._set_error(LedgerError(f"ledger {self.ledger_id}: {ENSEMBLE_CHANGES_MAX} ensemble changes without progress"))
            return
        plan = plan_ensemble_change(
            current, failed, dead, self._ctx.pool.writable(exclude=set(current) | failed | dead), self._pick_replacement,
            write_quorum_size=meta.write_quorum_size, ack_quorum_size=meta.ack_quorum_size, first_entry_id=first_unacked,
        )
        if plan.error is not None:
            self._set_error(NotEnoughBookiesError(f"ledger {self.ledger_id}: {plan.error}"))
            return
        if plan.needs_metadata_change:
            try:
                self._metadata, self._version = append_fragment(self._ctx.ledgers, self._metadata, self._version,
                                                                plan.first_entry_id, plan.ensemble)
            except LedgerError as exc:
                self._set_error(exc)
                return
            # Normal work after a bookie failed (the failure itself was logged where it was seen).
            log.info("ensemble changed ledger=%s from_entry=%d replaced=%s", self.ledger_id, first_unacked,
                     dict(plan.replaced))
            self._ctx.metrics.ensemble_changes.inc()
        with self._cond:
            self._failed_bookies -= failed
            if plan.unreplaced:
                self._dead_bookies |= set(plan.unreplaced)
                log.warning("carrying on without failed bookies (no replacement available) ledger=%s bookies=%s",
                            self.ledger_id, list(plan.unreplaced))
            self._end_change(self._refresh_write_sets() if plan.needs_metadata_change else None)
        self._drain_completions()

    def _end_change(self, sets: tuple[tuple[str, ...], ...] | None) -> None:
        """Under the lock: the change is recorded (or not needed): every unacknowledged entry
        takes its new write set and is re-sent where needed; held completions are released."""
        completed, resend = self._adds.end_change(sets)
        self._completing.extend(_ours(completed))
        self._outbox = _ours(resend)
        self._notify_all()

    def _pick_replacement(self, ensemble: Sequence[str], candidates: Sequence[str], failed: str) -> str | None:
        try:
            return self._ctx.placement.replacement(ensemble, candidates, failed=failed,
                                                   write_quorum_size=self._metadata.write_quorum_size)
        except NotEnoughBookiesError:
            return None

    def _notify_all(self) -> None:
        """Under the lock: wake everyone, the sender included (work queued, failures, closing)."""
        self._cond.notify_all()
        self._sender_wake.notify_all()

    def _set_error(self, err: LedgerError) -> None:
        with self._cond:
            if self._error is None:
                self._error = err
                log.warning("ledger writer stopped ledger=%s error=%s", self.ledger_id, err)
            self._notify_all()
        self._fail_all(err)

    def _fail_all(self, err: BaseException) -> None:
        with self._cond:
            victims = _ours(self._adds.fail_all())
            self._outbox = []
            self._notify_all()
        self._drain_completions()  # whatever completed before the failure keeps its order
        for p in victims:
            if not p.future.done():
                p.future.set_exception(err)
        self._ctx.metrics.adds_failed(len(victims))
        self._poller.wake()

    # ---- explicit LAC -------------------------------------------------------------------------

    def _lac_due(self) -> bool:
        return (
            self._explicit_lac_interval_s is not None
            and self._adds.lac > self._last_lac_sent
            and not self._outbox
            and time.monotonic() - self._last_add_time >= self._explicit_lac_interval_s
        )

    def _send_explicit_lac(self) -> None:
        lac = self._adds.lac
        self._last_lac_sent = lac
        for b in self._metadata.segments[-1].bookies:
            if b in self._dead_bookies or b in self._failed_bookies or self._ctx.pool.is_quarantined(b) \
                    or self._ctx.pool.faults.drop("write_lac", b):
                continue  # a failed bookie gets no explicit LAC (it would only stall this thread)
            try:
                self._ctx.pool.get(b).write_lac(self._key, self._master_key, lac, timeout_s=2.0)
            except LedgerError as exc:
                log.debug("explicit LAC not delivered bookie=%s error=%s", b, exc)

