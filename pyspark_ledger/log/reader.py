"""Reading a log: whole ranges by position, and tailing across rollovers."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Iterator

from metadata import LedgerId
from metadata.log_record import LogLedger, LogRecord
from pyspark_ledger.log.position import LogEntry, Position
from pyspark_ledger.log.service import LedgerService

if TYPE_CHECKING:
    from pyspark_ledger.ledger.read_handle import ReadHandle

TAIL_WAIT_S = 1.0


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
