"""A log reader's durable subscription (metadata.subscriptions): where a new one starts, where a
reader resumes, where an operator's move lands, and how far behind a subscription is.

A subscription stores the LAST message it consumed; a reader resumes at the message after it.
Where a subscription that does not exist yet starts is Kafka's `auto.offset.reset` (and Pulsar's
`subscriptionInitialPosition`): "latest" (the default of both: only messages appended after
it was made), "earliest" (everything the log still holds) or "none" (refuse: the subscription
must be made first, by `ledger subscriptions create` or SubscriptionStore.create)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from metadata import LedgerId
from metadata.errors import NoSuchSubscriptionError, SubscriptionExistsError
from metadata.log_record import LogLedger, LogRecord
from metadata.subscriptions import Subscription, SubscriptionPosition, SubscriptionStore
from pyspark_ledger.log.messages import message_times
from pyspark_ledger.log.position import Position

if TYPE_CHECKING:
    from pyspark_ledger.ledger.read_handle import ReadHandle

log = logging.getLogger(__name__)

INITIAL_POSITIONS = ("latest", "earliest", "none")
_NO_LEDGER = LedgerId(0, 0)  # a resume point past every ledger there is: only its seq matters


class LogReader(Protocol):
    """What this module needs of a log reader (log/reader.py's LogReader, which imports this)."""

    name: str

    @property
    def record(self) -> LogRecord: ...

    def refresh(self) -> LogRecord: ...

    def latest(self) -> Position | None: ...

    def position_at_time(self, t_ms: int) -> Position | None: ...

    def ledger_at_or_after(self, seq: int) -> LogLedger | None: ...

    def ledgers_from(self, seq: int) -> Iterator[LogLedger]: ...

    def ledger_handle(self, lid: LedgerId) -> ReadHandle: ...

    def last_entry(self, lg: LogLedger) -> int: ...


def stored(p: Position) -> SubscriptionPosition:
    """A reader's position (the last message consumed) as a subscription stores it."""
    return SubscriptionPosition(p.seq, p.entry_id, p.index)


def just_before(p: Position) -> SubscriptionPosition:
    """The stored position from which a reader resumes exactly at message `p`."""
    if p.index > 0:
        return SubscriptionPosition(p.seq, p.entry_id, p.index - 1)
    if p.entry_id > 0:
        return SubscriptionPosition.after_entry(p.seq, p.entry_id - 1)
    return SubscriptionPosition.before_ledger(p.seq)


def earliest(reader: LogReader) -> SubscriptionPosition:
    """Before the first message the log still holds (after every trim)."""
    return SubscriptionPosition.before_ledger(reader.refresh().trim_seq)


def latest(reader: LogReader) -> SubscriptionPosition:
    """After the last readable message (an open ledger's LAC): only messages appended later."""
    last = reader.latest()
    return earliest(reader) if last is None else SubscriptionPosition.after_entry(last.seq, last.entry_id)


def at_time(reader: LogReader, t_ms: int) -> SubscriptionPosition:
    """Resume at the first message whose time is at or after t_ms (Kafka's reset --to-datetime);
    latest when there is none yet."""
    found = reader.position_at_time(t_ms)
    return latest(reader) if found is None else just_before(found)


def subscribe(reader: LogReader, subs: SubscriptionStore, name: str, initial_position: str) -> Subscription:
    """The subscription `name` of the reader's log, made at `initial_position` when absent."""
    if initial_position not in INITIAL_POSITIONS:
        raise ValueError(f"initial_position {initial_position!r}: use one of {', '.join(INITIAL_POSITIONS)}")
    found = subs.get(reader.name, name)
    if found is not None:
        return found
    if initial_position == "none":
        raise NoSuchSubscriptionError(f"log {reader.name!r} has no subscription {name!r} (initial_position "
                                      "'none': create it first, e.g. `ledger subscriptions create`)")
    start = latest(reader) if initial_position == "latest" else earliest(reader)
    try:
        return subs.create(reader.name, name, start)
    except SubscriptionExistsError:  # another reader made it first: theirs stands
        return subs.read(reader.name, name)


def resume_start(reader: LogReader, sub: Subscription) -> Position | None:
    """Where a reader of `sub` starts (inclusive): the message after its position. None: the
    log's start. A position whose ledger was trimmed resumes at the next ledger, with a warning
    (the subscription's loss marker says what retention took; a manual trim is said here)."""
    p = sub.position
    if p is None:
        return None
    lg = reader.ledger_at_or_after(p.seq)
    if lg is None:
        return Position(p.seq, 0, _NO_LEDGER) if p.entry_id < 0 else Position(p.seq, p.entry_id, _NO_LEDGER, p.index + 1)
    if lg.seq != p.seq:
        if p.entry_id >= 0 or lg.seq > p.seq:
            log.warning("subscription resumes past trimmed ledgers log=%s subscription=%s position=%s:%s:%s "
                        "resumes_at_seq=%s lost_before_seq=%s", reader.name, sub.name, p.seq, p.entry_id,
                        p.index, lg.seq, sub.lost_before_seq)
        return Position(lg.seq, 0, lg.ledger_id)
    if p.entry_id < 0:
        return Position(lg.seq, 0, lg.ledger_id)
    return Position(lg.seq, p.entry_id, lg.ledger_id, p.index + 1)


@dataclass(frozen=True, slots=True)
class SubscriptionLag:
    """How far a subscription is behind its log's last readable entry."""

    entries: int  # whole entries after the one holding the position
    size_bytes: int  # their payload bytes (entries' recorded ledger lengths)
    time_ms: int  # now minus the time of the oldest of them (0 when caught up)


def lag(reader: LogReader, sub: Subscription, now_ms: int) -> SubscriptionLag:
    """Reads segments from the position's ledger on, and at most three entries (the position's,
    the oldest unread, an open ledger's last) per ledger it ends in: no scan."""
    reader.refresh()
    p = sub.position
    seq = reader.record.trim_seq if p is None else p.seq
    first_unread = 0 if p is None or p.entry_id < 0 else p.entry_id + 1
    entries = size = 0
    oldest_ms: int | None = None
    for lg in reader.ledgers_from(seq):
        first = first_unread if lg.seq == seq else 0
        last = reader.last_entry(lg)
        if last < first:
            continue
        entries += last - first + 1
        handle = reader.ledger_handle(lg.ledger_id)
        if first == 0 and lg.sealed and lg.size_bytes is not None:
            size += lg.size_bytes
        else:
            size += handle.read_entry(last).length - (handle.read_entry(first - 1).length if first > 0 else 0)
        if oldest_ms is None:
            oldest_ms = int(message_times(handle.read_entry(first), lg.ctime_ms)[0])
    return SubscriptionLag(entries, size, 0 if oldest_ms is None else max(0, now_ms - oldest_ms))
