"""WriteHandle: pipelined, quorum-acknowledged adds to one ledger (reference/bookkeeper-protocol.md).

Every protocol decision is the writer machine's (protocol.writer_machine, which the simulator
drives too): where each entry goes (the W bookies starting at index e mod E of its fragment's
ensemble), when an add completes (A acks from its write set AND every lower entry completed:
strictly in entry-id order, the LAC moving only then, none while an ensemble change is under
way), what a failed send calls for (an ensemble change: plan, compare-and-set, end; or carrying on
without a bookie that has no replacement while every write set can still reach A acks), FENCED
(every outstanding and later add fails with LedgerFencedError), when an explicit LAC is due, and
how the ledger is sealed.

This handle keeps the threads, locks and sockets and feeds the machine (under self._lock):
- callers encode an entry and hand it over; at low load the caller sends it at once, under load
  a sender thread drains the outbox and sends one batch per bookie per round (greedy batching);
- transport threads hand over answers (a timeout is an answer: the transport's add timer);
- the sender thread runs ensemble changes (writer_metadata does the compare-and-set I/O) and
  sends an explicit LAC after `explicit_lac_interval_ms` without adds, so tailing readers see the
  last entries without waiting for the next write.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
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
from pyspark_ledger.ledger.add_batches import BatchAnswer, batches
from pyspark_ledger.ledger.context import LedgerContext
from pyspark_ledger.ledger.read_handle import ReadHandle
from pyspark_ledger.ledger.run_payloads import RunPayloads, run_payloads
from pyspark_ledger.ledger.writer_metadata import record_fragment, write_close
from pyspark_ledger.protocol.digest import Digest, master_key
from pyspark_ledger.protocol.entry_format import entry_encoder, entry_format_of_ledger, run_encoder
from pyspark_ledger.protocol.pending_adds import PendingAdd
from pyspark_ledger.protocol.writer_machine import ChangeDone, Phase, Stop, StopKind, WriteFragment, WriterMachine
from pyspark_ledger.transport.add_future import AddFuture, AddFutureGroup, complete_run
from pyspark_ledger.transport.encoded_batch import EncodedAddBatch

log = logging.getLogger(__name__)

# Limits (named, so every queue and wait is bounded).
PENDING_ENTRIES_MAX = 20_000
PENDING_BYTES_MAX = 64 * 2**20
ENTRY_BYTES_MAX = 4 * 2**20
BACKPRESSURE_TIMEOUT_S = 60.0
CLOSE_DRAIN_TIMEOUT_S = 60.0
# An entry this large always goes out from the sender thread, never from the adding one: its
# sends to W bookies (system calls without the GIL) then overlap the caller's next work, e.g. a
# LogWriter's producer filling the next batch of messages.
DIRECT_SEND_BYTES_MAX = 64 * 1024


class _Pending(PendingAdd):
    """A run of entries in flight (one entry for add_entry_async): the protocol's view (ids, sizes,
    write sets, acks) plus what sending and completing need: one future for the whole run."""

    __slots__ = ("datas", "lac", "future", "started")

    def __init__(self, entry_id: int, datas: list[bytes], lac: int, size: int, sizes: list[int] | None,
                 future: AddFuture, started: float):
        PendingAdd.__init__(self, entry_id, size, sizes)
        self.datas = datas  # the encoded entries, in id order
        self.lac = lac  # the LAC carried in every entry of `datas`
        self.future = future  # resolves to the run's last entry id
        self.started = started  # time.monotonic() at submit, for the client's add latency metric


_WRITING = Phase.WRITING  # a module global: cheaper than the enum's attribute on the per-entry path
_STOP_ERRORS: dict[StopKind, type[LedgerError]] = {
    StopKind.FENCED: LedgerFencedError,
    StopKind.NO_QUORUM: NotEnoughBookiesError,
}


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
        entry_format = entry_format_of_ledger(metadata.custom)
        self._encode = entry_encoder(self._digest, *self._key, entry_format)
        self._encode_run = run_encoder(self._digest, *self._key, entry_format)
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
        # The protocol's decisions (protocol.writer_machine): where entries go, acks in, ordered
        # completions and the LAC out, ensemble changes, close. Touched only under self._lock.
        self._machine = WriterMachine(metadata.segments[-1].bookies, write_quorum_size=metadata.write_quorum_size,
                                      ack_quorum_size=metadata.ack_quorum_size)
        self._next_entry_id = 0  # the next id to encode (under _submit_lock)
        self._length_sent = 0  # the ledger's length through the last entry encoded (under _submit_lock)
        self._error: LedgerError | None = None  # why the machine stopped, as the exception adds raise
        self._closed = False
        self._close_error: BaseException | None = None  # a failed close stays failed
        lac_ms = context.explicit_lac_interval_ms
        self._explicit_lac_interval_s = lac_ms / 1000 if lac_ms > 0 else None
        self._add_timeout_s = context.add_timeout_s
        self._completing: deque[_Pending] = deque()
        self._completion_lock = threading.Lock()
        self._close_lock = threading.Lock()
        self._sender = threading.Thread(target=self._run_sender, name=f"ledger-sender {metadata.ledger_id}", daemon=True)
        self._sender.start()

    # ---- public API ---------------------------------------------------------------------------

    @property
    def ledger_id(self) -> LedgerId:
        return self._metadata.ledger_id

    def last_add_confirmed(self) -> int:
        return self._machine.adds.lac

    @property
    def length(self) -> int:
        return self._machine.adds.length

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
        machine = self._machine
        adds = machine.adds
        with self._submit_lock:
            eid = self._next_entry_id
            # The LAC read without the lock is at most stale, never ahead: any value <= the true
            # LAC is valid to piggyback. `length` is the ledger's length through this entry.
            lac = adds.lac
            length = self._length_sent + size
            data = self._encode(eid, lac, length, payload)
            now = time.monotonic()
            with self._lock:
                deadline = now + BACKPRESSURE_TIMEOUT_S
                while (adds.pending_count >= PENDING_ENTRIES_MAX or adds.pending_bytes + size > PENDING_BYTES_MAX) \
                        and machine.stopped is None and machine.phase is Phase.WRITING:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise AddTimeoutError(
                            f"ledger {self.ledger_id}: too many adds in flight for {BACKPRESSURE_TIMEOUT_S:g} s")
                    self._cond.wait(left)
                    now = time.monotonic()
                if self._error is not None:
                    raise self._error
                if machine.phase is not _WRITING or self._closed:
                    raise LedgerClosedError(f"ledger {self.ledger_id} is closed for adds")
                self._next_entry_id = eid + 1
                self._length_sent = length
                p = _Pending(eid, [data], lac, size, None, fut, now)
                # Low load: the sender thread is idle and nothing is queued, so the machine lets
                # this thread send at once and save a thread hop of latency. Under load it queues
                # the entry for the sender, which batches whatever accumulated.
                idle = self._sender_idle
                direct = machine.append(p, lac, now, idle and size < DIRECT_SEND_BYTES_MAX)
                if not direct and idle:
                    self._sender_wake.notify()  # a busy sender finds the outbox on its next round
            if direct:
                self._send([p])
        return fut

    def add_entries_async(self, payloads: Sequence[bytes] | RunPayloads) -> AddFuture:
        """Queue a run of entries (a list of bytes, or a pyarrow binary / large_binary array without
        nulls) as consecutive ids; the one future resolves to the run's LAST entry id once every
        entry of it is acknowledged (in order; the first is that id minus len(payloads) plus
        one). One submit step, one encode pass, one pending record in the writer machine (acks
        kept per bookie as bit masks over the run), one future and one send per bookie for the
        run; bookies speaking wire version 2 get it run-encoded (transport.encoded_batch). A
        failure inside the run (a bookie refusing an entry) fails that entry and every later one:
        the future fails and the LAC stops before it."""
        datas = run_payloads(payloads, ENTRY_BYTES_MAX)
        n, size = len(datas), sum(map(len, datas))
        if n > PENDING_ENTRIES_MAX or size > PENDING_BYTES_MAX:
            raise LedgerError(f"a run of {n} entries and {size} bytes exceeds the bounds of adds in flight "
                              f"({PENDING_ENTRIES_MAX} entries, {PENDING_BYTES_MAX} bytes): split it")
        fut = AddFuture(self._futures)
        machine = self._machine
        sizes = list(map(len, datas))
        with self._submit_lock:
            first, lac = self._next_entry_id, machine.adds.lac
            encoded, length = self._encode_run(first, lac, self._length_sent, datas)
            with self._lock:
                now = self._wait_for_room(n, size)
                self._next_entry_id, self._length_sent = first + n, length
                run = _Pending(first, encoded, lac, size, sizes, fut, now)
                idle = self._sender_idle
                direct = machine.append(run, lac, now, idle)
                if not direct and idle:
                    self._sender_wake.notify()
            if direct:
                self._send([run])
        return fut

    def _wait_for_room(self, count: int, size: int) -> float:
        """Under the lock: wait (bounded) until `count` more entries of `size` bytes fit in flight;
        raises if the writer stopped or closed. Returns the time the wait ended."""
        machine, adds = self._machine, self._machine.adds
        now = time.monotonic()
        deadline = now + BACKPRESSURE_TIMEOUT_S
        while (adds.pending_count + count > PENDING_ENTRIES_MAX or adds.pending_bytes + size > PENDING_BYTES_MAX) \
                and adds.entries and machine.stopped is None and machine.phase is Phase.WRITING:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AddTimeoutError(f"ledger {self.ledger_id}: too many adds in flight for {BACKPRESSURE_TIMEOUT_S:g} s")
            self._cond.wait(left)
            now = time.monotonic()
        if self._error is not None:
            raise self._error
        if machine.phase is not _WRITING or self._closed:
            raise LedgerClosedError(f"ledger {self.ledger_id} is closed for adds")
        return now

    def close(self, close_context: CloseContext | None = None) -> None:
        """Wait (bounded) for outstanding adds, then seal the ledger at the last acknowledged entry."""
        with self._close_lock:  # one close at a time: a second caller gets the first one's outcome
            self._close(close_context)

    def _close(self, close_context: CloseContext | None) -> None:
        machine = self._machine
        with self._cond:
            if self._closed:
                if self._close_error is not None:
                    raise self._close_error  # asking again never turns a failed close into a success
                return
            if machine.phase is Phase.WRITING:
                machine.begin_close()
            deadline = time.monotonic() + CLOSE_DRAIN_TIMEOUT_S
            while machine.adds.entries and self._error is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.1))
            stuck = _ours(machine.abandon())
        if stuck:
            self._fail(stuck, LedgerClosedError(f"ledger {self.ledger_id} closed with adds still outstanding"))
        try:
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
        with self._lock:
            meta, version = self._metadata, self._version
        result, meta, version = write_close(self._ctx.ledgers, meta, version, self._machine, self._lock, close_context)
        if isinstance(result, Stop):
            raise self._stopped(result)
        with self._lock:
            self._metadata, self._version = meta, version

    # ---- sending ------------------------------------------------------------------------------

    def _run_sender(self) -> None:
        machine = self._machine
        while True:
            outbox: list[PendingAdd] = []
            with self._cond:
                while True:
                    if self._closed or (machine.stopped is not None and not machine.adds.entries):
                        return
                    change = bool(machine.failed) and machine.stopped is None
                    if change:
                        break
                    outbox = machine.take_outbox()
                    if outbox or self._lac_due():
                        break
                    self._sender_idle = True
                    self._sender_wake.wait(self._explicit_lac_interval_s or 0.5)
                    self._sender_idle = False
            try:
                if change:
                    self._change_ensemble()
                elif outbox:
                    self._send(_ours(outbox))
                elif self._lac_due():
                    self._send_explicit_lac()
            except Exception as exc:
                log.exception("ledger sender failed ledger=%s", self.ledger_id)
                self._set_error(exc if isinstance(exc, LedgerError) else LedgerError(f"sender failed: {exc!r}"))
                return

    def _send(self, outbox: list[_Pending]) -> None:
        # The machine groups runs by the bookies they still need: with E == W (the common case)
        # every run needs the same ones, so the whole outbox is one group, encoded once per
        # batch and sent to each of its bookies.
        with self._lock:
            groups = self._machine.sends(outbox)
        for targets, segments in groups.items():
            for ids, lacs, datas in batches(cast(list[tuple[_Pending, int, int]], segments)):
                batch = EncodedAddBatch.of_columns(self._key, self._master_key, ids, lacs, datas)
                # Claim every bookie's stream first, then send to all of them back to back: the
                # bookies start (and their fsyncs overlap) as close together as possible.
                sends = [send for bookie_id in targets if (send := self._submit_batch(bookie_id, ids, batch))]
                for send in sends:
                    send()

    def _submit_batch(self, bookie_id: str, ids: Sequence[int], batch: EncodedAddBatch) -> Callable[[], None] | None:
        """Queue `batch` for one bookie; returns the send this thread must run next, if any."""
        if self._ctx.pool.faults.drop("add", bookie_id):
            return None  # lost on the way; the add timeout will notice
        try:
            client = self._ctx.pool.get(bookie_id)
            answer = BatchAnswer(self._on_batch, bookie_id, ids)
            return client.submit_encoded(batch, answer, timeout_s=self._add_timeout_s, on_stored=answer.on_stored)
        except LedgerError as exc:
            self._on_batch(bookie_id, ids, Status.INTERNAL_ERROR, f"transport: {exc}")
            return None

    def _on_batch(self, bookie_id: str, entry_ids: Sequence[int], status: Status, message: str) -> None:
        """Runs on a transport thread: hand the answer to the machine, queue what completed, wake
        the sender for a failure. Lock order: never take _completion_lock while holding _cond."""
        stop: Stop | None = None
        with self._lock:
            if self._closed:
                return  # shutting down: late answers no longer matter
            machine = self._machine
            if status == Status.OK:
                done = machine.on_acks(bookie_id, entry_ids)
                if not done:
                    return  # no entry completed: nobody to wake, nothing to resolve
                self._completing.extend(_ours(done))
                if self._cond._waiters:  # type: ignore[attr-defined] # notify_all is Python code: skip it when nobody waits
                    self._cond.notify_all()  # room freed: wake add callers and close, not the sender
            elif status in (Status.FENCED, Status.UNAUTHORIZED):
                stop = machine.on_fenced(bookie_id, status.name)
            elif machine.on_add_failed(bookie_id, entry_ids) or bookie_id in machine.failed:
                # The sender replaces it (ensemble change); completions are held until then.
                log.warning("bookie failed an add ledger=%s bookie=%s status=%s %s",
                            self.ledger_id, bookie_id, status.name, message)
            if status != Status.OK:
                self._notify_all()
        if stop is not None:
            self._stopped(stop)
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

    def _change_ensemble(self) -> None:
        """Sender thread: the machine plans the change for the failures reported so far; this
        records it (writer_metadata) and sends what the new write sets still need. Completions
        stay held (PendingAdds) from the failure until the new write sets are known."""
        machine = self._machine
        with self._lock:
            failed = set(machine.failed)
        for b in failed:
            self._ctx.pool.quarantine(b)
        candidates = self._ctx.pool.writable()  # the machine leaves out the ensemble, failed and dead bookies
        with self._cond:
            cmd = machine.begin_change(candidates, self._pick_replacement)
            meta, version = self._metadata, self._version
        if isinstance(cmd, WriteFragment):
            cmd, meta, version = record_fragment(self._ctx.ledgers, meta, version, cmd, machine, self._lock)
            if isinstance(cmd, ChangeDone):
                with self._lock:
                    self._metadata, self._version = meta, version
                # Normal work after a bookie failed (the failure itself was logged where it was seen).
                log.info("ensemble changed ledger=%s from_entry=%d ensemble=%s", self.ledger_id,
                         meta.segments[-1].first_entry_id, list(meta.segments[-1].bookies))
                self._ctx.metrics.ensemble_changes.inc()
        if isinstance(cmd, Stop):
            self._stopped(cmd)
            return
        if cmd.unreplaced:
            log.warning("carrying on without failed bookies (no replacement available) ledger=%s bookies=%s",
                        self.ledger_id, list(cmd.unreplaced))
        with self._cond:
            self._completing.extend(_ours(cmd.completed))
            self._notify_all()  # the sender sends the re-queued entries on its next round
        self._drain_completions()

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
        """The driver failed (sender thread): the machine stops with `err` as the reason."""
        kind = StopKind.FENCED if isinstance(err, LedgerFencedError) else StopKind.FAILED
        with self._cond:
            stop = self._machine.stop(kind, str(err))
        self._stopped(stop, err)

    def _stopped(self, stop: Stop, err: LedgerError | None = None) -> LedgerError:
        """The machine stopped: adds raise the matching error from now on (the first one
        stands), the victims fail."""
        with self._cond:
            if self._error is None:
                cls = _STOP_ERRORS.get(stop.kind, LedgerError)
                self._error = err or cls(f"ledger {self.ledger_id}: {stop.message}")
                log.warning("ledger writer stopped ledger=%s error=%s", self.ledger_id, self._error)
            err = self._error
            self._notify_all()
        self._fail(_ours(stop.victims), err)
        return err

    def _fail(self, victims: list[_Pending], err: BaseException) -> None:
        self._drain_completions()  # whatever completed before the failure keeps its order
        failed = [p for p in victims if not p.future.done()]
        for p in failed:
            p.future.set_exception(err)
        self._ctx.metrics.adds_failed(len(failed))
        self._poller.wake()

    # ---- explicit LAC -------------------------------------------------------------------------

    def _lac_due(self) -> bool:
        interval_s = self._explicit_lac_interval_s
        return interval_s is not None and self._machine.lac_due(time.monotonic(), interval_s)

    def _send_explicit_lac(self) -> None:
        with self._lock:
            lac, bookies = self._machine.explicit_lac()
        for b in bookies:
            if self._ctx.pool.is_quarantined(b) or self._ctx.pool.faults.drop("write_lac", b):
                continue  # a failed bookie gets no explicit LAC (it would only stall this thread)
            try:
                self._ctx.pool.get(b).write_lac(self._key, self._master_key, lac, timeout_s=2.0)
            except LedgerError as exc:
                log.debug("explicit LAC not delivered bookie=%s error=%s", b, exc)
