"""The single writer of a named log: open (take over), append, roll over, close.

Two failures must never leave the log in a state that no later writer repairs:
- a seal (close) of the old ledger that fails during rollover: the writer recovers (fences and
  closes) that ledger itself, a bounded number of times, and if that fails too it stops, so
  that the old ledger is still one of the log's unsealed ledgers that the next writer's
  takeover recovers (it recovers every unsealed ledger, not only the last two). Carrying on
  would strand an OPEN ledger with no writer in the middle of the log;
- a compare-and-set adding a ledger to the log whose outcome is unknown (timeout, connection
  loss: it may have been applied): the record is re-read, and the ledger deleted only when the
  record is known not to reference it. Unknown is not absent.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING

from metadata import CloseContext, CreateContext, LedgerId, LedgerMetadata, MetadataError
from metadata.log_record import MESSAGE_FORMAT_BATCHED, LogRecord, widened_times
from pyspark_ledger.errors import LedgerError, LedgerFencedError
from pyspark_ledger.log.batching import BATCH_BYTES_MAX, BatchSettings, Linger, MessageHandle, OpenBatch, Place
from pyspark_ledger.log.errors import LogFencedError, LogWriterStoppedError, StaleEpochError
from pyspark_ledger.log.position import Position
from pyspark_ledger.log.rollover import RolloverPolicy
from pyspark_ledger.log.service import LedgerService
from pyspark_ledger.log.takeover import check_epoch, take_over
from pyspark_ledger.protocol.entry_format import BATCH_FORMAT_VERSION, ENTRY_FORMAT_KEY
from pyspark_ledger.protocol.message_batch import Header

if TYPE_CHECKING:
    from pyspark_ledger.ledger.write_handle import WriteHandle
    from pyspark_ledger.transport.add_future import AddFuture

log = logging.getLogger(__name__)

# A seal that failed during rollover is retried as a recovery (fence + close) this many times,
# waiting SEAL_RECOVERY_BACKOFF_S, then twice that, ... in between; then the writer stops.
SEAL_RECOVERY_ATTEMPTS_MAX = 3
SEAL_RECOVERY_BACKOFF_S = 0.25
APPEND_TIMEOUT_S = 120.0
FLUSH_TIMEOUT_S = 120.0


def _message_bytes(payload: object) -> bytes:
    """A message's payload that is not bytes: a copy of a bytearray or memoryview, else refused."""
    if not isinstance(payload, (bytearray, memoryview)):
        raise TypeError(f"payload must be bytes, not {type(payload).__name__}")
    return bytes(payload)


@dataclass
class LedgerOptions:
    ensemble_size: int = 3
    write_quorum_size: int = 3
    ack_quorum_size: int = 2
    digest_type: str = "crc32c"
    password: bytes = b""


class LogWriter:
    """The single writer of a log. `append` returns the position of the acknowledged message.

    With `batching` (LedgerClient.open_log_writer's default, once the cluster setting
    message_batches allows it) messages are gathered into batches, one entry each (entry
    format 3, protocol.message_batch): a batch is sent when it holds batch.max_messages
    messages or batch.max_bytes bytes, when its first message is batch.max_delay_ms old, on
    `append` (which sends at once and waits), `flush` and `close`. Without it every message is
    one entry of format 2, readable by every release."""

    def __init__(
        self,
        client: LedgerService,
        name: str,
        *,
        create: bool = True,
        options: LedgerOptions | None = None,
        rollover_entries: int | None = None,
        rollover_bytes: int | None = None,
        rollover_age_s: float | None = None,
        crash_hook: Callable[[str], None] | None = None,
        batching: bool = False,
        batch: BatchSettings | None = None,
    ):
        self.client = client
        self.name = name
        self.options = options or LedgerOptions()
        # None: from the log's settings once it is open (log.rollover); the arguments win
        self._rollover_args = (rollover_entries, rollover_bytes, rollover_age_s)
        self.rollover = RolloverPolicy()
        self._crash = crash_hook or (lambda step: None)
        self._lock = threading.RLock()
        self._stopped: LedgerError | None = None
        self._closed = False
        self._ledger: WriteHandle | None = None
        self._seq = -1
        self._entries = 0
        self._bytes = 0
        self._opened_at = 0.0
        # Ledgers this writer closed whose end the log record does not show yet (the record's
        # update failed): written with the next change of the record. (entries, bytes, append times)
        self._unrecorded_seals: dict[LedgerId, tuple[int, int, tuple[int, int] | None]] = {}
        # The earliest and latest append time of the batches sent to the current ledger (None:
        # none, or unbatched entries, which carry no time): the log record keeps it at the seal.
        self._ledger_times_ms: tuple[int, int] | None = None
        self.epoch = -1
        self.from_seq = -1  # every ledger this writer appends has seq >= from_seq
        self.batching = batching
        self.batch = batch or BatchSettings()
        self._batch: OpenBatch | None = None  # the open batch (under self._lock)
        self._last_sent: Future[Place] | None = None  # the newest batch sent: flush waits on it
        # The append time of the newest batch sent: times never step back along this writer's
        # ledgers (a wall clock may), so a search by time inside a ledger can bisect (log/time_search.py).
        self._append_ms = 0
        self._open(create)
        self._linger = None
        if batching and self.batch.max_delay_ms > 0:
            self._linger = Linger(self._lock, self.batch.max_delay_ms, self._open_batch_time, self._send_batch, name)
        # The batch settings as append_async reads them once per message: a batch is sent when its
        # newest message's index reaches _last_index (at once without a linger) or its bytes the bound.
        self._batch_max_bytes = self.batch.max_bytes
        self._last_index = self.batch.max_messages - 1 if self._linger is not None else 0

    # -- opening --

    def _open(self, create: bool) -> None:
        # The shared takeover: bump the epoch, fence and close EVERY unsealed ledger of the log
        # (not only the last two: a writer that stopped after a failed seal left one behind its
        # newest ledger, and no ledger may stay OPEN without a writer), record their seals.
        taken = take_over(self.client, self.name, self.options.password, create=create, writer="this log writer")
        self.epoch, self.from_seq = taken.epoch, taken.from_seq
        log.info("log writer opening log=%s epoch=%d", self.name, self.epoch)
        rec = taken.record
        entries, size, age = self._rollover_args
        self.rollover = RolloverPolicy.for_log(rec, max_entries=entries, max_bytes=size, max_age_s=age)
        previous = rec.ledgers[-1].ledger_id if rec.ledgers else None
        handle = self._new_ledger(previous)
        rec = self._add_to_record(handle)
        self._switch_to(handle, rec)

    def _check_epoch(self, r: LogRecord) -> None:
        check_epoch(r, self.epoch, "this log writer")

    def _new_ledger(self, previous: LedgerId | None) -> WriteHandle:
        o = self.options
        ctx = CreateContext.builder().part_of_data_set(f"log:{self.name}")
        if previous is not None:
            ctx = ctx.follows_ledger(previous)
        if not self.batching:  # exactly the call of releases before batches
            return self.client.create_ledger(o.ensemble_size, o.write_quorum_size, o.ack_quorum_size, o.digest_type,
                                             o.password, create_context=ctx.build())
        return self.client.create_ledger(
            o.ensemble_size, o.write_quorum_size, o.ack_quorum_size, o.digest_type, o.password,
            create_context=ctx.build(), custom={ENTRY_FORMAT_KEY: str(BATCH_FORMAT_VERSION).encode()},
        )

    # -- the log record --

    def _with_unrecorded_seals(self, r: LogRecord) -> LogRecord:
        for lid, (count, size, times) in self._unrecorded_seals.items():
            i = r.index_of(lid)
            if i is not None and not r.ledgers[i].sealed:
                r = r.with_sealed(lid, count, size, append_times_ms=times)
        return r

    def _forget_recorded_seals(self, rec: LogRecord) -> None:
        for lid in list(self._unrecorded_seals):
            i = rec.index_of(lid)
            if i is None or rec.ledgers[i].sealed:
                del self._unrecorded_seals[lid]

    def _add_to_record(self, handle: WriteHandle) -> LogRecord:
        """Append `handle`'s ledger to the log record (with any seals not recorded yet), checking
        the epoch. On failure the record is re-read: the ledger is deleted only if the record is
        known not to reference it; if the change was applied after all, it stands."""
        lid = handle.ledger_id

        def change(r: LogRecord) -> LogRecord:
            self._check_epoch(r)
            r = self._with_unrecorded_seals(r).with_ledger(lid)
            # Batches: say so in the record before any batch is written, so readers that cannot
            # read them refuse the log by name (metadata.log_record.MESSAGE_FORMATS).
            return r.with_message_format(MESSAGE_FORMAT_BATCHED) if self.batching else r

        try:
            rec, _ = self.client.logs.update_head(self.name, change)
        except Exception as exc:  # noqa: BLE001 - every failure is decided by re-reading below
            rec = self._decide_failed_add(handle, exc)
        self._forget_recorded_seals(rec)
        return rec

    def _decide_failed_add(self, handle: WriteHandle, exc: Exception) -> LogRecord:
        """The compare-and-set adding `handle` raised `exc`. A timeout or connection loss leaves
        its outcome unknown: only the record says whether it was applied."""
        lid = handle.ledger_id
        try:
            rec, _ = self.client.logs.read_tail(self.name)
        except Exception as read_exc:  # noqa: BLE001 - unknown is not absent: keep the ledger
            handle._close_quietly()  # unsealed; whoever finds it in the log recovers it
            log.warning("could not tell whether a ledger was added to the log; keeping it log=%s ledger=%s "
                        "error=%s reread_error=%s", self.name, lid, exc, read_exc)
            raise self._stop(LogWriterStoppedError(
                f"log {self.name!r}: adding ledger {lid} to the log failed ({exc}) and re-reading the log failed "
                f"({read_exc}): the ledger is kept, as the log may reference it; open a new writer")) from exc
        if rec.index_of(lid) is None:
            self._discard(handle)
            if isinstance(exc, LogFencedError):
                raise self._stop(exc) from exc
            raise exc
        log.warning("adding a ledger to the log reported %s but was applied log=%s ledger=%s", type(exc).__name__,
                    self.name, lid)
        if rec.writer_epoch != self.epoch:
            handle._close_quietly()  # in the log: the writer that took over recovers it
            raise self._stop(StaleEpochError(self.name, rec.writer_epoch, self.epoch, "this log writer")) from exc
        return rec

    def _discard(self, handle: WriteHandle) -> None:
        """A ledger the log record is known not to reference: remove it rather than leak it."""
        try:
            handle._close_quietly()
            self.client.delete_ledger(handle.ledger_id)
        except Exception as exc:  # noqa: BLE001 - best effort; the orphan auditor finds leftovers
            log.warning("could not delete an unused ledger ledger=%s error=%s", handle.ledger_id, exc)

    def _switch_to(self, handle: WriteHandle, rec: LogRecord) -> None:
        i = rec.index_of(handle.ledger_id)
        if i is None:
            raise LedgerError(f"log {self.name!r}: ledger {handle.ledger_id} is not in the log it was added to")
        self._ledger, self._seq = handle, rec.ledgers[i].seq
        self._entries, self._bytes, self._opened_at = 0, 0, time.monotonic()
        self._ledger_times_ms = None

    # -- appending --

    def append(self, payload: bytes, timeout_s: float | None = None, *, key: bytes | None = None,
               timestamp: int | None = None, headers: Sequence[Header] | None = None) -> Position:
        """Append one message, send it at once (with whatever its batch held) and wait for it."""
        wait_s = timeout_s if timeout_s is not None else APPEND_TIMEOUT_S
        if not self.batching:
            self._unbatched_only(key, timestamp, headers)
            return self._append_entry(payload).result(timeout=wait_s)
        handle = self.append_async(payload, key=key, timestamp=timestamp, headers=headers)
        assert isinstance(handle, MessageHandle)  # batching: a message's handle
        with self._lock:
            if self._batch is not None and handle.in_batch(self._batch.future):
                self._send_batch()
        return handle.result(timeout=wait_s)

    def append_async(self, payload: bytes, *, key: bytes | None = None, timestamp: int | None = None,
                     headers: Sequence[Header] | None = None) -> MessageHandle | Future[Position]:
        """Queue one message. Batching: a MessageHandle, settled with its batch; `key`, the event
        time `timestamp` (ms) and `headers` ((str, bytes) pairs) travel with it. Unbatched: a
        Future of the entry's position (no key, time or headers: format 2 has no place for them).
        Batched, this is the whole path down to OpenBatch.add: no layer between (a Python call a
        message is a fifth of what the issue lets an event time and a header cost)."""
        if not self.batching:
            self._unbatched_only(key, timestamp, headers)
            return self._append_entry(payload)
        if type(payload) is not bytes:
            payload = _message_bytes(payload)
        if len(payload) > BATCH_BYTES_MAX:
            raise LedgerError(f"message of {len(payload)} bytes exceeds the maximum {BATCH_BYTES_MAX}")
        with self._lock:
            if self._stopped is not None or self._closed:
                self._check_appendable()
            b = self._batch
            if b is None or b.size_bytes + len(payload) > self._batch_max_bytes:
                b = self._next_batch()
            index = b.add(payload, key, timestamp, headers)
            if index >= self._last_index or b.size_bytes >= self._batch_max_bytes:
                self._send_batch()
        return MessageHandle(b.future, index)

    def _next_batch(self) -> OpenBatch:
        """Send the open batch if any (the next message would overflow it) and open a new one."""
        if self._batch is not None:
            self._send_batch()
        b = self._batch = OpenBatch(time.monotonic())
        if self._linger is not None:
            self._linger.batch_opened()
        return b

    def flush(self, timeout_s: float | None = None) -> None:
        """Send the open batch and wait until every batch sent so far is settled (acknowledged or
        failed: each message's handle says which). Unbatched: nothing is ever held back."""
        with self._lock:
            self._send_batch()
            last = self._last_sent
        if last is not None:
            try:
                last.exception(timeout=timeout_s if timeout_s is not None else FLUSH_TIMEOUT_S)
            except TimeoutError:
                raise LedgerError(f"log {self.name!r}: flush timed out") from None

    def _unbatched_only(self, key: bytes | None, timestamp: int | None, headers: Sequence[Header] | None) -> None:
        if key is not None or timestamp is not None or headers:
            raise LedgerError(f"log writer for {self.name!r} is unbatched (batching=False, or the cluster setting "
                              "message_batches is off): its entries (format 2) carry no key, event time or headers")

    def _check_appendable(self) -> None:
        if self._stopped is not None:
            raise self._stopped
        if self._closed:
            raise LedgerError(f"log writer for {self.name!r} is closed")

    def _open_batch_time(self) -> float | None:
        return None if self._batch is None else self._batch.opened

    def _send_batch(self) -> None:
        """Send the open batch as one entry (under self._lock). Never raises: a failure settles
        the batch's messages with it (the linger thread calls this too)."""
        b, self._batch = self._batch, None
        if b is None or not b.payloads:  # none, or opened by a message that was then refused
            return
        self._last_sent = out = b.future
        try:
            self._check_appendable()
            self._append_ms = max(self._append_ms, time.time_ns() // 1_000_000)
            data = b.encode(self._append_ms)
            inner, seq, lid = self._add(data, self._append_ms)
        except Exception as exc:  # noqa: BLE001 - settles every message of the batch
            out.set_exception(exc)
            return

        def done(f: AddFuture) -> None:
            exc = f.exception()
            if exc is None:
                out.set_result((seq, f.result(), lid))
            else:
                out.set_exception(self._stop(exc) if isinstance(exc, LedgerFencedError) else exc)

        inner.add_done_callback(done)

    def _add(self, data: bytes, append_ms: int | None = None) -> tuple[AddFuture, int, LedgerId]:
        """Add one entry to the current ledger, rolling over first if due (under self._lock);
        `append_ms`: the time a batch carries (None: an unbatched entry)."""
        if self._rollover_due(len(data)):
            self._rollover()
        handle, seq = self._ledger, self._seq
        assert handle is not None
        if append_ms is not None:  # before the add: an entry whose add fails may still be stored
            self._ledger_times_ms = widened_times(self._ledger_times_ms, append_ms)
        try:
            inner = handle.add_entry_async(data)
        except LedgerFencedError as exc:
            raise self._stop(exc) from exc
        self._entries += 1
        self._bytes += len(data)
        return inner, seq, handle.ledger_id

    def _append_entry(self, payload: bytes) -> Future[Position]:
        """One message as one entry of format 2 (batching=False), exactly as before batches."""
        with self._lock:
            self._check_appendable()
            inner, seq, lid = self._add(payload)
        out: Future[Position] = Future()

        def done(f: AddFuture) -> None:
            exc = f.exception()
            if exc is None:
                out.set_result(Position(seq, f.result(), lid))
            else:
                out.set_exception(self._stop(exc) if isinstance(exc, LedgerFencedError) else exc)

        inner.add_done_callback(done)
        return out

    def _stop(self, exc: BaseException) -> LedgerError:
        """Stop appending for good; every later append raises the first reason."""
        err = exc if isinstance(exc, LogWriterStoppedError) else LogFencedError(f"log {self.name!r}: writer fenced: {exc}")
        if self._stopped is None:
            self._stopped = err
            log.warning("log writer stopped log=%s epoch=%d reason=%s", self.name, self.epoch, exc)
        return self._stopped

    def _rollover_due(self, next_size: int) -> bool:
        return self.rollover.due(self._entries, self._bytes, time.monotonic() - self._opened_at, next_size)

    def roll_over(self) -> None:
        """Start a new ledger now (the current one is closed)."""
        with self._lock:
            if self._stopped is not None:
                raise self._stopped
            self._rollover()

    def _rollover(self) -> None:
        old, old_seq, old_times = self._ledger, self._seq, self._ledger_times_ms
        assert old is not None
        self._crash("before_create")
        new = self._new_ledger(old.ledger_id)
        self._crash("after_create")
        self._crash("before_cas")
        rec = self._add_to_record(new)
        self._crash("after_cas")
        self._switch_to(new, rec)
        log.info("log rolled over log=%s from_seq=%d to_seq=%d", self.name, old_seq, self._seq)
        self._crash("before_close")
        self._seal_rolled_over(old, old_times)
        self._crash("after_close")

    # -- sealing --

    def _seal_rolled_over(self, handle: WriteHandle, times: tuple[int, int] | None) -> None:
        """Close the ledger a rollover left behind. If its close fails, recover it (fence + close,
        bounded); if that fails too, stop: it is then still among the log's unsealed ledgers,
        which the next writer's takeover recovers."""
        try:
            handle.close(CloseContext.builder().because_max_entry_count_reached().build())
            meta = handle.metadata
        except LedgerFencedError as exc:
            raise self._stop(exc) from exc
        except (LedgerError, MetadataError) as exc:
            log.warning("closing a rolled-over ledger failed; recovering it log=%s ledger=%s error=%s",
                        self.name, handle.ledger_id, exc)
            meta = self._recover_rolled_over(handle.ledger_id, exc)
        self._note_sealed(meta, times)
        try:
            rec, _ = self.client.logs.update_head(self.name, self._sealing_change)
            self._forget_recorded_seals(rec)
        except LogFencedError as exc:
            raise self._stop(exc) from exc  # the next writer records the end when it recovers the ledger
        except MetadataError as exc:
            log.warning("could not record a sealed ledger's end in the log yet; it goes with the next change "
                        "log=%s ledger=%s error=%s", self.name, handle.ledger_id, exc)

    def _recover_rolled_over(self, lid: LedgerId, cause: BaseException) -> LedgerMetadata:
        last: BaseException = cause
        delay_s = SEAL_RECOVERY_BACKOFF_S
        for attempt in range(1, SEAL_RECOVERY_ATTEMPTS_MAX + 1):
            try:
                reader = self.client.open_ledger(lid, recovery=True, password=self.options.password)
            except (LedgerError, MetadataError) as exc:
                last = exc
                log.warning("recovering a rolled-over ledger failed log=%s ledger=%s attempt=%d error=%s",
                            self.name, lid, attempt, exc)
                if attempt < SEAL_RECOVERY_ATTEMPTS_MAX:
                    time.sleep(delay_s)
                    delay_s *= 2
                continue
            meta = reader.metadata
            reader.close()
            return meta
        raise self._stop(LogWriterStoppedError(
            f"log {self.name!r}: ledger {lid} could not be sealed at rollover ({cause}) nor recovered in "
            f"{SEAL_RECOVERY_ATTEMPTS_MAX} attempts (last: {last}); this writer stops rather than leave it OPEN "
            "behind a newer ledger: open a new writer, whose takeover recovers it"))

    def _note_sealed(self, meta: LedgerMetadata, times: tuple[int, int] | None) -> None:
        if meta.last_entry_id is None or meta.length_bytes is None:
            raise LedgerError(f"ledger {meta.ledger_id} has no end after closing")
        self._unrecorded_seals[meta.ledger_id] = (meta.last_entry_id + 1, meta.length_bytes, times)

    def _sealing_change(self, r: LogRecord) -> LogRecord | None:
        self._check_epoch(r)
        return self._with_unrecorded_seals(r)

    def close(self) -> None:
        if self._linger is not None:
            self._linger.stop()  # outside the lock: its thread needs the lock to end
        with self._lock:
            if self._closed:
                return
            self._send_batch()  # what is pending goes (or fails with the reason the writer stopped)
            self._closed = True
            if self._ledger is None:
                return
            handle = self._ledger
            if self._stopped is not None:
                handle._close_quietly()  # stop its sender; unsealed, the next writer recovers it
                return
            try:
                handle.close(CloseContext.builder().because_client_shutdown().build())
            except LedgerFencedError as exc:
                raise self._stop(exc) from exc
            self._note_sealed(handle.metadata, self._ledger_times_ms)
            try:
                rec, _ = self.client.logs.update_head(self.name, self._sealing_change)
            except LogFencedError:
                return  # the next writer records it when it recovers the ledger
            self._forget_recorded_seals(rec)

    @property
    def current_ledger(self) -> LedgerId | None:
        return None if self._ledger is None else self._ledger.ledger_id

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
