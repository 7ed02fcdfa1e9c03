"""The messages of one entry: an unbatched entry (format 2) is one message at index 0; a batch
(format 3, protocol.message_batch) is many, each with its own position (seq, entry, index)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from metadata import LedgerId
from metadata.log_record import MESSAGE_FORMATS, LogRecord
from pyspark_ledger.log.errors import LogFormatError
from pyspark_ledger.log.position import LogEntry, Position
from pyspark_ledger.protocol.arrow_times import entry_append_ms
from pyspark_ledger.protocol.entry_format import BATCH_FORMAT_VERSION, Entry
from pyspark_ledger.protocol.message_batch import NO_TIME, decode_batch


def check_readable(rec: LogRecord) -> None:
    """Refuse a log whose message format this release does not know (a later release's)."""
    if rec.message_format not in MESSAGE_FORMATS:
        raise LogFormatError(f"log {rec.name!r} holds messages in format {rec.message_format!r}, which this release "
                             f"cannot read (it reads {', '.join(MESSAGE_FORMATS)}): upgrade pyspark-ledger")


def messages(seq: int, ledger_id: LedgerId, e: Entry, first: int = 0, last: int | None = None,
             ledger_time_ms: int | None = None, arrow_times: bool = False) -> Iterator[LogEntry]:
    """The messages of entry `e` with index first..last (inclusive; None: to the end).
    `ledger_time_ms` (the ledger's join time) is every message's `timestamp_ms` fallback.
    `arrow_times`: `e` is an Arrow entry of a ledger whose entries carry their own append time
    (protocol/arrow_times.py), which is then the entry's, as Spark's `timestamp` shows it."""
    if e.format_version != BATCH_FORMAT_VERSION:
        if first == 0 and (last is None or last >= 0):
            own = entry_append_ms(e.payload, f"entry {e.entry_id} of ledger {ledger_id}") if arrow_times else None
            yield LogEntry(Position(seq, e.entry_id, ledger_id), e.payload, append_time_ms=own,
                           ledger_time_ms=ledger_time_ms)
        return
    b = decode_batch(e.payload, where=f"entry {e.entry_id} of ledger {ledger_id}")
    stop = b.count if last is None else min(b.count, last + 1)
    if first >= stop:
        return
    payloads = b.payloads(first)
    times = b.append_ms[first:stop].tolist()
    events = b.event_ms[first:stop].tolist() if b.event_ms is not None else None
    eid = e.entry_id
    for i in range(first, stop):
        j = i - first
        event = None if events is None or events[j] == NO_TIME else events[j]
        yield LogEntry(Position(seq, eid, ledger_id, i), payloads[j], b.key(i), times[j], event, tuple(b.headers(i)),
                       ledger_time_ms)


def message_times(e: Entry, ledger_time_ms: int) -> np.ndarray:
    """Each message's time in entry `e` (LogEntry.timestamp_ms, in bulk): a batch's append times,
    or for an unbatched entry its ledger's join time."""
    if e.format_version != BATCH_FORMAT_VERSION:
        return np.array([ledger_time_ms], dtype=np.int64)
    return decode_batch(e.payload, where=f"entry {e.entry_id}").append_ms
