"""Where one log's read starts and stops, from its bounds (options/positions.py) and its ledger list.

A cut is a point between two rows of a log: before row `index` of entry `entry` of the ledger
with sequence number `seq`. A read covers [start cut, end cut): a starting position is
inclusive, an ending one exclusive. A time T cuts before the first ledger (in log order) that
joined the log at or after T: rows carry their ledger's time (rows.py `timestamp`), so a read
from startingTimestamp T returns the rows whose timestamp is at least T, provided times do not
step back along the log (one writer's clock).

Data loss: a starting position whose ledger was trimmed or is no longer in the log fails the
read, naming what is gone (failOnDataLoss=true, the default), or starts at the first ledger
that remains after it, with a warning (false). Pure: the log is seen through LogLedgers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from metadata.log_record import LogLedger
from pyspark_ledger.datasource.errors import LedgerUserError, OptionError
from pyspark_ledger.datasource.options.positions import Bound

log = logging.getLogger(__name__)


class DataLossError(LedgerUserError):
    """Data a read asks for is gone (trimmed, or its ledger deleted) and failOnDataLoss is true."""


@dataclass(frozen=True, slots=True, order=True)
class Cut:
    seq: int
    entry: int
    index: int = 0

    def for_raw(self) -> Cut:
        """Raw entries are one row each: a cut inside one is the cut after it."""
        return Cut(self.seq, self.entry + 1) if self.index else self


class LogLedgers(Protocol):
    """What cuts need to know of one log."""

    name: str
    trim_seq: int  # every seq below it was trimmed
    next_seq: int  # the seq the next ledger appended gets

    def at_or_after(self, seq: int) -> LogLedger | None:
        """The first ledger of the log with seq >= `seq`."""

    def first_at_or_after_time(self, ms: int) -> LogLedger | None:
        """The first ledger (in log order) that joined the log at or after `ms`."""


def _checked_position(view: LogLedgers, option: str, bound: Bound) -> Cut:
    p = bound.position
    assert p is not None
    found = view.at_or_after(p.seq)
    if found is not None and found.seq == p.seq and found.ledger_id != p.ledger_id:
        raise OptionError(option, f"log {view.name!r}: position {bound} names ledger {p.ledger_id.qualified_name}, but seq "
                          f"{p.seq} of the log is ledger {found.ledger_id.qualified_name}")
    if p.seq > view.next_seq:
        raise OptionError(option, f"log {view.name!r}: position {bound} is past the end of the log (its next ledger "
                          f"gets seq {view.next_seq})")
    return Cut(p.seq, p.entry_id, bound.index)


def start_cut(view: LogLedgers, option: str, bound: Bound, fail_on_data_loss: bool) -> Cut | None:
    """Where the read of this log starts, or None when it reads nothing (latest, a time after
    every ledger). The data-loss check of a starting position happens here."""
    if bound.kind == "earliest":
        return Cut(0, 0)
    if bound.kind == "latest":
        return None  # a batch read that starts at the end is empty
    if bound.kind == "timestamp":
        assert bound.timestamp_ms is not None
        found = view.first_at_or_after_time(bound.timestamp_ms)
        return None if found is None else Cut(found.seq, 0)
    cut = _checked_position(view, option, bound)
    if cut.seq >= view.next_seq:
        return cut  # the end of the log: nothing to read, nothing lost
    found = view.at_or_after(cut.seq)
    if found is not None and found.seq == cut.seq:
        return cut
    return _lost(view, option, bound, cut, found, fail_on_data_loss)


def _lost(view: LogLedgers, option: str, bound: Bound, cut: Cut, found: LogLedger | None,
          fail_on_data_loss: bool) -> Cut | None:
    if cut.seq < view.trim_seq:
        gone = f"ledgers with seq below {view.trim_seq} were trimmed"
    else:
        gone = f"the ledger with seq {cut.seq} is no longer in the log"
    now = f"the next data is at seq {found.seq} entry 0" if found is not None else "nothing remains after it"
    message = (f"log {view.name!r}: the read starts at {bound} ({option}), but {gone} (data lost: seq {cut.seq} "
               f"entry {cut.entry} up to {'seq ' + str(found.seq) if found is not None else 'the end'}); {now}")
    if fail_on_data_loss:
        raise DataLossError(f"{message}. Set failOnDataLoss=false to read what remains")
    log.warning("data loss (failOnDataLoss=false, skipped): %s", message)
    return None if found is None else Cut(found.seq, 0)


def end_cut(view: LogLedgers, option: str, bound: Bound) -> Cut | None:
    """Where the read of this log stops (exclusive), or None: at the readable end (latest)."""
    if bound.kind == "latest":
        return None
    if bound.kind == "earliest":
        return Cut(0, 0)
    if bound.kind == "timestamp":
        assert bound.timestamp_ms is not None
        found = view.first_at_or_after_time(bound.timestamp_ms)
        return None if found is None else Cut(found.seq, 0)
    return _checked_position(view, option, bound)
