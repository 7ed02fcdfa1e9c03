"""Named logs: an ordered list of ledgers with a single writer, positions, tailing and retention.

Opening a log as writer (reference/bookkeeper-protocol.md "Opening a log", Oxia epochs):
  1. bump the log's writer epoch by compare-and-set: every later change by an older writer fails;
  2. fence and recover the last TWO ledgers (the old writer may have been rolling over);
  3. create a new ledger and append it by compare-and-set, checking the epoch is still ours.
Nothing is written before step 3 succeeds. Rollover appends the new ledger (by CAS) before the old
one is closed. A position is (ledger sequence number, entry id): totally ordered along the log.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol

from metadata import CloseContext, CreateContext, LedgerId, NoSuchLedgerError
from metadata.context import now_ms
from metadata.log_record import LogLedger, LogRecord, Retention
from metadata.logs import LogExistsError, LogManager
from pyspark_ledger.errors import LedgerError, LedgerFencedError

if TYPE_CHECKING:
    from pyspark_ledger.ledger.read_handle import ReadHandle
    from pyspark_ledger.ledger.write_handle import WriteHandle
    from pyspark_ledger.transport.add_future import AddFuture

log = logging.getLogger(__name__)

TAIL_WAIT_S = 1.0
ROLLOVER_CLOSE_TIMEOUT_S = 60.0


class LedgerService(Protocol):
    """What the log layer needs of a client: the log records and ledgers to create, open and
    delete. LedgerClient satisfies it structurally, so this module never imports the client
    (which imports this module to offer open_log_writer and friends)."""

    logs: LogManager

    def create_ledger(self, ensemble_size: int, write_quorum_size: int, ack_quorum_size: int, digest_type: str,
                      password: bytes, *, create_context: CreateContext | None = None) -> "WriteHandle": ...

    def open_ledger(self, ledger_id: LedgerId, recovery: bool = False, password: bytes = b"") -> "ReadHandle": ...

    def delete_ledger(self, ledger_id: LedgerId) -> None: ...


class LogFencedError(LedgerFencedError):
    """Another writer opened the log: this writer may not append any more."""


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """A place in a log. Ordered by (seq, entry_id); `ledger_id` is carried for convenience."""

    seq: int
    entry_id: int
    ledger_id: LedgerId = field(compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "ledger": self.ledger_id.qualified_name, "entry": self.entry_id}

    @classmethod
    def from_json(cls, d: dict[str, Any] | str) -> "Position":
        if isinstance(d, str):
            d = json.loads(d)
        try:
            return cls(int(d["seq"]), int(d["entry"]), LedgerId.from_qualified_name(d["ledger"]))  # type: ignore[index]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a log position: {d!r} (expected {{\"seq\": n, \"ledger\": hex, \"entry\": n}})") from exc

    def __str__(self) -> str:
        return f"{self.seq}:{self.ledger_id}:{self.entry_id}"


@dataclass(frozen=True)
class LogEntry:
    position: Position
    payload: bytes


# ---- writer ----------------------------------------------------------------------------------------


@dataclass
class LedgerOptions:
    ensemble_size: int = 3
    write_quorum_size: int = 3
    ack_quorum_size: int = 2
    digest_type: str = "crc32c"
    password: bytes = b""


class LogWriter:
    """The single writer of a log. `append` returns the position of the acknowledged entry."""

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
    ):
        self.client = client
        self.name = name
        self.options = options or LedgerOptions()
        self.rollover_entries = rollover_entries
        self.rollover_bytes = rollover_bytes
        self.rollover_age_s = rollover_age_s
        self._crash = crash_hook or (lambda step: None)
        self._lock = threading.RLock()
        self._stopped: LedgerError | None = None
        self._closed = False
        self._ledger: "WriteHandle | None" = None
        self._seq = -1
        self._entries = 0
        self._bytes = 0
        self._opened_at = 0.0
        self.epoch = -1
        self._open(create)

    # -- opening --

    def _open(self, create: bool) -> None:
        logs = self.client.logs
        if create:
            try:
                logs.create(LogRecord(self.name))
            except LogExistsError:
                pass
        rec, _ = logs.update(self.name, lambda r: r.with_epoch(r.writer_epoch + 1))
        self.epoch = rec.writer_epoch
        log.warning("log writer opening log=%s epoch=%d", self.name, self.epoch)
        sealed = {}
        for lg in rec.ledgers[-2:]:
            if lg.sealed:
                continue
            try:
                meta = self.client.open_ledger(lg.ledger_id, recovery=True, password=self.options.password).metadata
            except NoSuchLedgerError:
                continue  # deleted by a trim; nothing to recover
            sealed[lg.ledger_id] = (meta.last_entry_id + 1, meta.length_bytes)  # type: ignore[operator]
        previous = rec.ledgers[-1].ledger_id if rec.ledgers else None
        handle = self._new_ledger(previous)
        try:
            def change(r: LogRecord) -> LogRecord:
                self._check_epoch(r)
                for lid, (count, size) in sealed.items():
                    r = r.with_sealed(lid, count, size)
                return r.with_ledger(handle.ledger_id)

            rec, _ = logs.update(self.name, change)
        except BaseException:
            self._discard(handle)
            raise
        self._switch_to(handle, rec.ledgers[-1].seq)

    def _check_epoch(self, r: LogRecord) -> None:
        if r.writer_epoch != self.epoch:
            raise LogFencedError(
                f"log {self.name!r}: another writer took over (epoch {r.writer_epoch}, this writer has {self.epoch})"
            )

    def _new_ledger(self, previous: LedgerId | None) -> "WriteHandle":
        o = self.options
        ctx = CreateContext.builder().part_of_data_set(f"log:{self.name}")
        if previous is not None:
            ctx = ctx.follows_ledger(previous)
        return self.client.create_ledger(
            o.ensemble_size, o.write_quorum_size, o.ack_quorum_size, o.digest_type, o.password,
            create_context=ctx.build(),
        )

    def _discard(self, handle: "WriteHandle") -> None:
        """A ledger that never made it into the log: remove it rather than leak it."""
        try:
            handle._close_quietly()  # noqa: SLF001
            self.client.delete_ledger(handle.ledger_id)
        except Exception as exc:  # noqa: BLE001 - best effort; the orphan auditor finds leftovers
            log.warning("could not delete an unused ledger ledger=%s error=%s", handle.ledger_id, exc)

    def _switch_to(self, handle: "WriteHandle", seq: int) -> None:
        self._ledger, self._seq = handle, seq
        self._entries, self._bytes, self._opened_at = 0, 0, time.monotonic()

    # -- appending --

    def append(self, payload: bytes, timeout_s: float | None = None) -> Position:
        return self.append_async(payload).result(timeout=timeout_s if timeout_s is not None else 120.0)

    def append_async(self, payload: bytes) -> "Future[Position]":
        with self._lock:
            if self._stopped is not None:
                raise self._stopped
            if self._closed:
                raise LedgerError(f"log writer for {self.name!r} is closed")
            if self._rollover_due(len(payload)):
                self._rollover()
            handle, seq = self._ledger, self._seq
            assert handle is not None
            try:
                inner = handle.add_entry_async(payload)
            except LedgerFencedError as exc:
                raise self._stop(exc) from exc
            self._entries += 1
            self._bytes += len(payload)
        out: Future[Position] = Future()
        lid = handle.ledger_id

        def done(f: "AddFuture") -> None:
            exc = f.exception()
            if exc is None:
                out.set_result(Position(seq, f.result(), lid))
            else:
                out.set_exception(self._stop(exc) if isinstance(exc, LedgerFencedError) else exc)

        inner.add_done_callback(done)
        return out

    def _stop(self, exc: BaseException) -> LedgerError:
        err = exc if isinstance(exc, LogFencedError) else LogFencedError(f"log {self.name!r}: writer fenced: {exc}")
        if self._stopped is None:
            self._stopped = err
            log.warning("log writer stopped log=%s epoch=%d reason=%s", self.name, self.epoch, exc)
        return self._stopped

    def _rollover_due(self, next_size: int) -> bool:
        if self._entries == 0:
            return False
        return bool(
            (self.rollover_entries is not None and self._entries >= self.rollover_entries)
            or (self.rollover_bytes is not None and self._bytes + next_size > self.rollover_bytes)
            or (self.rollover_age_s is not None and time.monotonic() - self._opened_at >= self.rollover_age_s)
        )

    def roll_over(self) -> None:
        """Start a new ledger now (the current one is closed)."""
        with self._lock:
            self._rollover()

    def _rollover(self) -> None:
        old, old_seq = self._ledger, self._seq
        assert old is not None
        self._crash("before_create")
        new = self._new_ledger(old.ledger_id)
        self._crash("after_create")
        self._crash("before_cas")
        try:
            rec, _ = self.client.logs.update(self.name, lambda r: (self._check_epoch(r), r.with_ledger(new.ledger_id))[1])
        except LogFencedError as exc:
            self._discard(new)
            raise self._stop(exc) from exc
        except BaseException:
            self._discard(new)
            raise
        self._crash("after_cas")
        self._switch_to(new, rec.ledgers[-1].seq)
        log.info("log rolled over log=%s from_seq=%d to_seq=%d", self.name, old_seq, self._seq)
        self._crash("before_close")
        self._seal(old, CloseContext.builder().because_max_entry_count_reached().build())
        self._crash("after_close")

    def _seal(self, handle: "WriteHandle", ctx: CloseContext | None) -> None:
        try:
            handle.close(ctx)
        except LedgerFencedError as exc:
            raise self._stop(exc) from exc
        meta = handle.metadata
        count, size = meta.last_entry_id + 1, meta.length_bytes  # type: ignore[operator]
        try:
            self.client.logs.update(self.name, lambda r: (self._check_epoch(r), r.with_sealed(handle.ledger_id, count, size))[1])
        except LogFencedError:
            pass  # the next writer records it when it recovers the ledger

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._ledger is not None and self._stopped is None:
                self._seal(self._ledger, CloseContext.builder().because_client_shutdown().build())

    @property
    def current_ledger(self) -> LedgerId | None:
        return None if self._ledger is None else self._ledger.ledger_id

    def __enter__(self) -> "LogWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---- reader ----------------------------------------------------------------------------------------


class LogReader:
    def __init__(self, client: LedgerService, name: str, password: bytes = b""):
        self.client = client
        self.name = name
        self.password = password
        self.record, self.version = client.logs.read(name)
        self._changed = threading.Event()
        self._watch = client.logs.watch(name, self._on_change)
        self._handles: dict[LedgerId, "ReadHandle"] = {}

    def _on_change(self, rec: LogRecord | None, version: int) -> None:
        if rec is not None and version > self.version:
            self.record, self.version = rec, version
        self._changed.set()

    def refresh(self) -> LogRecord:
        self.record, self.version = self.client.logs.read(self.name)
        return self.record

    def _handle(self, lid: LedgerId) -> "ReadHandle":
        h = self._handles.get(lid)
        if h is None:
            h = self.client.open_ledger(lid, password=self.password)
            self._handles[lid] = h
        return h

    def _last_entry(self, lg: LogLedger) -> int:
        """The last readable entry of one ledger of the log: its end if sealed, else its LAC."""
        h = self._handle(lg.ledger_id)
        if lg.sealed:
            if not h.is_closed():
                h.refresh()  # the handle was opened while the ledger was still open
            return lg.entry_count - 1  # type: ignore[operator]
        if not h.is_closed():
            h.refresh()
        return h.last_add_confirmed()

    def earliest(self) -> Position | None:
        rec = self.refresh()
        return None if not rec.ledgers else Position(rec.ledgers[0].seq, 0, rec.ledgers[0].ledger_id)

    def latest(self) -> Position | None:
        """The position of the last readable entry (for an open ledger, its LAC)."""
        rec = self.refresh()
        for lg in reversed(rec.ledgers):
            last = self._last_entry(lg)
            if last >= 0:
                return Position(lg.seq, last, lg.ledger_id)
        return None

    def read(self, start: Position | None = None, end: Position | None = None) -> Iterator[LogEntry]:
        """Entries from start to end inclusive (defaults: the whole readable log), in order."""
        rec = self.refresh()
        for lg in rec.ledgers:
            if start is not None and lg.seq < start.seq:
                continue
            if end is not None and lg.seq > end.seq:
                return
            first = start.entry_id if start is not None and lg.seq == start.seq else 0
            last = self._last_entry(lg)
            if end is not None and lg.seq == end.seq:
                last = min(last, end.entry_id)
            if last < first:
                continue
            for e in self._handle(lg.ledger_id).read_entries(first, last):
                yield LogEntry(Position(lg.seq, e.entry_id, lg.ledger_id), e.payload)

    def tail(self, start: Position | None = None, *, idle_timeout_s: float | None = None) -> Iterator[LogEntry]:
        """Follow the log across rollovers, yielding every entry once and in order. Waits on the
        log's metadata watch and on long-poll LAC reads, never on sleep loops. Ends after
        idle_timeout_s without new entries (None: never)."""
        seq = start.seq if start is not None else None
        nxt = start.entry_id if start is not None else 0
        idle_since = time.monotonic()
        while True:
            rec = self.record
            lg = next((x for x in rec.ledgers if seq is None or x.seq >= seq), None)
            if lg is None:
                if idle_timeout_s is not None and time.monotonic() - idle_since > idle_timeout_s:
                    return
                self._changed.clear()
                self._changed.wait(TAIL_WAIT_S)
                continue
            if seq is None or lg.seq != seq:
                seq, nxt = lg.seq, 0
            is_last = lg is rec.ledgers[-1]
            h = self._handle(lg.ledger_id)
            remaining = None if idle_timeout_s is None else max(idle_timeout_s - (time.monotonic() - idle_since), 0.0)
            wait_s = remaining if is_last else 0.0
            if wait_s is not None:
                wait_s = min(wait_s, TAIL_WAIT_S) if is_last else 0.0
            progressed = False
            for e in h.tail(nxt, idle_timeout_s=wait_s if is_last else 0.0):
                yield LogEntry(Position(lg.seq, e.entry_id, lg.ledger_id), e.payload)
                nxt = e.entry_id + 1
                progressed = True
            if progressed:
                idle_since = time.monotonic()
            if h.is_closed() and nxt > h.metadata.last_entry_id:  # type: ignore[operator]
                nxt_lg = next((x for x in self.record.ledgers if x.seq > lg.seq), None)
                if nxt_lg is not None:
                    seq, nxt = nxt_lg.seq, 0
                    continue
            if idle_timeout_s is not None and time.monotonic() - idle_since > idle_timeout_s:
                return
            if not progressed:
                self._changed.clear()
                self._changed.wait(0.05 if not is_last else 0.0)

    def close(self) -> None:
        self._watch.cancel()
        for h in self._handles.values():
            h.close()
        self._handles.clear()

    def __enter__(self) -> "LogReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---- retention -------------------------------------------------------------------------------------


def choose_trim(rec: LogRecord, *, before: Position | None, max_age_ms: int | None, max_size_bytes: int | None,
                now: int | None = None) -> set[LedgerId]:
    """Pure: which whole ledgers a trim removes. Never the last ledger (the writer's), never an
    unsealed one; `before` removes ledgers that end before the position's ledger."""
    now = now_ms() if now is None else now
    candidates = [lg for lg in rec.ledgers[:-1] if lg.sealed]
    out: set[LedgerId] = set()
    if before is not None:
        out |= {lg.ledger_id for lg in candidates if lg.seq < before.seq}
    if max_age_ms is not None:
        out |= {lg.ledger_id for lg in candidates if now - lg.ctime_ms > max_age_ms}
    if max_size_bytes is not None:
        total = rec.size_bytes
        for lg in candidates:
            if total <= max_size_bytes:
                break
            out.add(lg.ledger_id)
            total -= lg.size_bytes or 0
    # Only a prefix may go: a log never gets holes.
    prefix: set[LedgerId] = set()
    for lg in rec.ledgers:
        if lg.ledger_id not in out:
            break
        prefix.add(lg.ledger_id)
    return prefix


def trim_log(
    client: LedgerService,
    name: str,
    *,
    before: Position | None = None,
    max_age_s: float | None = None,
    max_size_bytes: int | None = None,
    crash_hook: Callable[[str], None] | None = None,
) -> list[LedgerId]:
    """Trim whole ledgers off the front of a log, crash-safely (Apache Pulsar issue 13238):
    1. CAS: remove them from the list AND record them as pending deletions (one change);
    2. delete each ledger; 3. CAS: clear them from pending deletions.
    A crash anywhere leaves them recorded, and the next pass (any trim) finishes the job.
    With no criteria given, the log's own retention settings apply."""
    crash = crash_hook or (lambda step: None)
    logs: LogManager = client.logs
    rec, _ = logs.read(name)
    if before is None and max_age_s is None and max_size_bytes is None:
        max_age_s = None if rec.retention.max_age_ms is None else rec.retention.max_age_ms / 1000
        max_size_bytes = rec.retention.max_size_bytes
    age_ms = None if max_age_s is None else int(max_age_s * 1000)
    chosen: set[LedgerId] = set()

    def step1(r: LogRecord) -> LogRecord | None:
        chosen.clear()
        chosen.update(choose_trim(r, before=before, max_age_ms=age_ms, max_size_bytes=max_size_bytes))
        return r.without_ledgers(chosen) if chosen else None

    rec, _ = logs.update(name, step1)
    crash("after_cas")
    pending = list(rec.pending_deletions)
    deleted: set[LedgerId] = set()
    for lid in pending:
        try:
            client.delete_ledger(lid)
        except NoSuchLedgerError:
            pass  # deleted by an earlier pass that crashed before step 3
        deleted.add(lid)
        crash("after_delete")
    if deleted:
        logs.update(name, lambda r: r.without_pending(deleted))
    crash("after_clear")
    if pending:
        log.info("log trimmed log=%s ledgers=%s", name, [str(x) for x in pending])
    return pending


def set_retention(client: LedgerService, name: str, *, max_age_s: float | None, max_size_bytes: int | None) -> None:
    ret = Retention(None if max_age_s is None else int(max_age_s * 1000), max_size_bytes)
    client.logs.update(name, lambda r: r.with_retention(ret))
