"""Reading a log: whole ranges by position, and tailing across rollovers.

A reader works on the log's head (one record, however long the log): opening at the tail reads
nothing else. Reading from a position fetches only the segments that cover it, lazily, through
the LogManager's segment cache (issue 19)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from metadata import LedgerId
from metadata.log_record import LogLedger, LogRecord
from metadata.log_segments import LogHead
from metadata.subscriptions import Subscription, SubscriptionStore
from pyspark_ledger.log.errors import NotSubscribedError
from pyspark_ledger.log.messages import check_readable, messages
from pyspark_ledger.log.position import LogEntry, Position
from pyspark_ledger.log.service import LedgerService
from pyspark_ledger.log.subscription import resume_start, stored, subscribe
from pyspark_ledger.log.time_lookup import position_at_time
from pyspark_ledger.protocol.arrow_times import ledger_is_timed

if TYPE_CHECKING:
    from pyspark_ledger.ledger.read_handle import ReadHandle

TAIL_WAIT_S = 1.0


class LogReader:
    """Reads a log by position, or as a durable subscription: with `subscription`, read() and
    tail() without a start resume after the subscription's stored position, and commit() moves
    it (log/subscription.py; a subscription that does not exist yet is made at
    `initial_position`: "latest", "earliest" or "none", as Kafka's auto.offset.reset)."""

    def __init__(self, client: LedgerService, name: str, password: bytes = b"", *,
                 subscription: str | None = None, initial_position: str = "latest"):
        self.client = client
        self.name = name
        self.password = password
        self.head, self.version = client.logs.read_head(name)
        check_readable(self.head.record)
        self._changed = threading.Event()
        self._watch = client.logs.watch_head(name, self._on_change)
        self._handles: dict[LedgerId, ReadHandle] = {}
        self.subscription = subscription
        self._subs = SubscriptionStore(client.logs.store)
        if subscription is not None:
            try:
                subscribe(self, self._subs, subscription, initial_position)
            except BaseException:
                self.close()
                raise

    def commit(self, position: Position, *, allow_backward: bool = False) -> Subscription:
        """Record `position` as the last message this reader's subscription consumed: the next
        reader of the subscription resumes after it. Never moves it backward (a late or repeated
        commit changes nothing) unless allow_backward. Returns the subscription as stored."""
        if self.subscription is None:
            raise NotSubscribedError(f"log {self.name!r}: this reader has no subscription to commit "
                                     "(open_log_reader(..., subscription=NAME))")
        p = stored(position)
        return self._subs.commit(self.name, self.subscription, p.seq, p.entry_id, p.index, allow_backward=allow_backward)

    def subscription_state(self) -> Subscription:
        """The reader's subscription as stored now."""
        if self.subscription is None:
            raise NotSubscribedError(f"log {self.name!r}: this reader has no subscription")
        return self._subs.read(self.name, self.subscription)

    def _start(self, start: Position | None) -> Position | None:
        """An explicit start wins; else a subscribed reader resumes after its subscription."""
        if start is not None or self.subscription is None:
            return start
        return resume_start(self, self.subscription_state())

    @property
    def record(self) -> LogRecord:
        """The head view: the log's fields and its tail's ledgers (older ones are in segments)."""
        return self.head.record

    def _on_change(self, head: LogHead | None, version: int) -> None:
        if head is not None and version > self.version:
            self.head, self.version = head, version
        self._changed.set()

    def refresh(self) -> LogRecord:
        self.head, self.version = self.client.logs.read_head(self.name)
        check_readable(self.head.record)
        return self.record

    def _ledgers(self, from_seq: int = 0) -> Iterator[LogLedger]:
        """The log's ledgers from `from_seq` on, fetching the segments only as they are reached."""
        return self.client.logs.iter_ledgers(self.name, self.head, from_seq)

    def _ledger_at_or_after(self, seq: int) -> LogLedger | None:
        return self.client.logs.ledger_at_or_after(self.name, self.head, seq)

    # The public names of what log/subscription.py needs of a reader.
    def ledger_at_or_after(self, seq: int) -> LogLedger | None:
        return self._ledger_at_or_after(seq)

    def ledgers_from(self, seq: int) -> Iterator[LogLedger]:
        return self._ledgers(seq)

    def ledger_handle(self, lid: LedgerId) -> ReadHandle:
        return self._handle(lid)

    def last_entry(self, lg: LogLedger) -> int:
        return self._last_entry(lg)

    def _handle(self, lid: LedgerId) -> ReadHandle:
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
            return lg.entry_count - 1  # type: ignore[operator]  # sealed: it has a count
        if not h.is_closed():
            h.refresh()
        return h.last_add_confirmed()

    def earliest(self) -> Position | None:
        self.refresh()
        first = self._ledger_at_or_after(0)
        return None if first is None else Position(first.seq, 0, first.ledger_id)

    def latest(self) -> Position | None:
        """The position of the last readable entry (for an open ledger, its LAC). Reads the tail,
        and segments backwards only past empty ledgers."""
        self.refresh()
        head = self.head
        for lg in self._ledgers_backward(head):
            last = self._last_entry(lg)
            if last >= 0:
                return Position(lg.seq, last, lg.ledger_id)
        return None

    def _ledgers_backward(self, head: LogHead) -> Iterator[LogLedger]:
        yield from reversed(head.record.ledgers)
        for index in range(head.seg_next - 1, head.seg_first - 1, -1):
            yield from (lg for lg in reversed(self.client.logs.segment(self.name, index)) if lg.seq >= head.trim_seq)

    def read(self, start: Position | None = None, end: Position | None = None) -> Iterator[LogEntry]:
        """Messages from start to end inclusive (defaults: the whole readable log), in order: one
        per unbatched entry, each of a batch with its own index. Only the segments from start's
        on are fetched, as the read reaches them. No start: the whole log, or for a subscribed
        reader everything after its subscription's position."""
        self.refresh()
        start = self._start(start)
        for lg in self._ledgers(0 if start is None else start.seq):
            if end is not None and lg.seq > end.seq:
                return
            first = start.entry_id if start is not None and lg.seq == start.seq else 0
            last = self._last_entry(lg)
            if end is not None and lg.seq == end.seq:
                last = min(last, end.entry_id)
            if last < first:
                continue
            handle = self._handle(lg.ledger_id)
            timed = ledger_is_timed(handle.metadata.custom)
            for e in handle.read_entries(first, last):
                skip = start.index if start is not None and (lg.seq, e.entry_id) == (start.seq, start.entry_id) else 0
                upto = end.index if end is not None and (lg.seq, e.entry_id) == (end.seq, end.entry_id) else None
                yield from messages(lg.seq, lg.ledger_id, e, skip, upto, lg.ctime_ms, timed)

    def position_at_time(self, t_ms: int) -> Position | None:
        """The first message (in log order) whose time (LogEntry.timestamp_ms) is at or after
        t_ms, as Kafka's offsetsForTimes; None when there is none (yet). Ledgers are passed by
        their join and seal times, entries of the ledger that may hold t_ms bisected by their
        own times (log/time_search.py): a few entry reads, not a scan."""
        self.refresh()
        return position_at_time(self._ledgers(0), t_ms, lambda lg: self._handle(lg.ledger_id),
                                self.head.record.next_seq)

    def tail(self, start: Position | None = None, *, idle_timeout_s: float | None = None) -> Iterator[LogEntry]:
        """Follow the log across rollovers, yielding every message once and in order (from
        `start` inclusive, which may be inside a batch). Waits on the
        log's metadata watch and on long-poll LAC reads, never on sleep loops. Ends after
        idle_timeout_s without new entries (None: never). No start: the log's start, or for a
        subscribed reader the message after its subscription's position."""
        start = self._start(start)
        seq = start.seq if start is not None else None
        nxt = start.entry_id if start is not None else 0
        skip_at = (start.seq, start.entry_id, start.index) if start is not None and start.index else None
        idle_since = time.monotonic()
        while True:
            rec = self.record
            lg = self._ledger_at_or_after(0 if seq is None else seq)
            if lg is None:
                if idle_timeout_s is not None and time.monotonic() - idle_since > idle_timeout_s:
                    return
                self._changed.clear()
                self._changed.wait(TAIL_WAIT_S)
                continue
            if seq is None or lg.seq != seq:
                seq, nxt = lg.seq, 0
            is_last = bool(rec.ledgers) and lg.seq == rec.ledgers[-1].seq
            h = self._handle(lg.ledger_id)
            remaining = None if idle_timeout_s is None else max(idle_timeout_s - (time.monotonic() - idle_since), 0.0)
            wait_s = remaining if is_last else 0.0
            if wait_s is not None:
                wait_s = min(wait_s, TAIL_WAIT_S) if is_last else 0.0
            progressed = False
            timed = ledger_is_timed(h.metadata.custom)
            for e in h.tail(nxt, idle_timeout_s=wait_s if is_last else 0.0):
                skip = skip_at[2] if skip_at is not None and skip_at[:2] == (lg.seq, e.entry_id) else 0
                yield from messages(lg.seq, lg.ledger_id, e, skip, None, lg.ctime_ms, timed)
                nxt = e.entry_id + 1
                progressed = True
            if progressed:
                idle_since = time.monotonic()
            if h.is_closed() and nxt > h.metadata.last_entry_id:  # type: ignore[operator]  # closed: it has an end
                nxt_lg = self._ledger_at_or_after(lg.seq + 1)
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

    def __enter__(self) -> LogReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
