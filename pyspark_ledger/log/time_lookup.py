"""The search by time (log/time_search.py) over real ledgers: reads only the entries the
bisection asks for, each once. Shared by LogReader.position_at_time and the Spark source's
startingTimestamp / endingTimestamp (datasource/read/log_view.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from metadata.log_record import LogLedger
from pyspark_ledger.log.messages import message_times
from pyspark_ledger.log.position import Position
from pyspark_ledger.log.time_search import first_entry_at_or_after, first_index_at_or_after, may_hold_at_or_after
from pyspark_ledger.protocol.arrow_times import entry_append_ms, ledger_is_timed
from pyspark_ledger.protocol.entry_format import BATCH_FORMAT_VERSION, entry_format_of_ledger

if TYPE_CHECKING:
    from pyspark_ledger.ledger.read_handle import ReadHandle


def readable_last_entry(handle: ReadHandle, lg: LogLedger) -> int:
    """The last readable entry of one ledger of a log: its end if sealed, else its LAC."""
    if not handle.is_closed():
        handle.refresh()
    if lg.sealed:
        return lg.entry_count - 1  # type: ignore[operator]  # sealed: it has a count
    return handle.last_add_confirmed()


def position_in_ledger(handle: ReadHandle, lg: LogLedger, last_entry: int, t_ms: int) -> Position | None:
    """The first message of ledger `lg` (entries 0..last_entry) at or after t_ms, or None. In a
    ledger of Arrow entries with times of their own (protocol/arrow_times.py), the first row of
    the first entry at or after t_ms."""
    timed_arrow = ledger_is_timed(handle.metadata.custom)
    if not timed_arrow and entry_format_of_ledger(handle.metadata.custom) != BATCH_FORMAT_VERSION:
        # Unbatched: every entry has the ledger's join time; no entry needs reading.
        return Position(lg.seq, 0, lg.ledger_id) if last_entry >= 0 and lg.ctime_ms >= t_ms else None
    times: dict[int, np.ndarray] = {}  # each entry read once

    def times_of(entry_id: int) -> np.ndarray:
        if entry_id not in times:
            e = next(iter(handle.read_entries(entry_id, entry_id)))
            if timed_arrow:  # one time for all the entry's rows: index 0 is its first row
                own = entry_append_ms(e.payload, f"entry {entry_id} of ledger {lg.ledger_id}")
                times[entry_id] = np.array([lg.ctime_ms if own is None else own], dtype=np.int64)
            else:
                times[entry_id] = message_times(e, lg.ctime_ms)
        return times[entry_id]

    entry_id = first_entry_at_or_after(0, last_entry, t_ms, lambda k: int(times_of(k).max()))
    if entry_id is None:
        return None
    index = first_index_at_or_after(times_of(entry_id), t_ms)
    if index is None:
        raise AssertionError(f"entry {entry_id} of ledger {lg.ledger_id}: its latest time is at or after {t_ms} "
                             "but no message's is")
    return Position(lg.seq, entry_id, lg.ledger_id, index)


def position_at_time(ledgers: Iterator[LogLedger], t_ms: int, handle_of: Callable[[LogLedger], ReadHandle],
                     ledgers_max: int) -> Position | None:
    """The first message (in log order) of `ledgers` at or after t_ms; None when there is none.
    Ledgers known to be older are passed without a read; `ledgers_max` bounds the walk."""
    lg = next(ledgers, None)
    for _ in range(ledgers_max + 1):
        if lg is None:
            return None
        nxt = next(ledgers, None)
        if may_hold_at_or_after(lg, nxt, t_ms):
            h = handle_of(lg)
            found = position_in_ledger(h, lg, readable_last_entry(h, lg), t_ms)
            if found is not None:
                return found
        lg = nxt
    raise AssertionError(f"more than {ledgers_max} ledgers in a log whose next seq says so")
