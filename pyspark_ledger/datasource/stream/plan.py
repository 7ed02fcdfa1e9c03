"""A micro-batch's read plan: the ranges covering [start, end) of every log, and what is lost.

Spark plans a batch from two offsets (offsets.py), on the driver, and may plan the same
batch again after a restart; between the two, retention may have trimmed what the stream had
not read. That is data loss (failOnDataLoss, as Kafka's): with `true` (the default) the query
fails with an error naming the log, where the stream was and what is gone; with `false` it
reads what remains, from the first ledger after the gap, with a warning in the driver's log.
The checks are a batch read's (cuts.start_cut, planning's ranges): a start in a trimmed
ledger, a listed ledger whose metadata is gone. A stream adds two: a log deleted under it
(read.py) and a position naming another ledger than the log's at that seq (the log was
deleted and made again). A position at the very end of the newest trimmed ledger lost nothing:
the head keeps that ledger's entry count to tell (read_to_its_end).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from metadata import LedgerId, log_trim_marks
from metadata.logs import NoSuchLogError
from pyspark_ledger.datasource.options.positions import Bound
from pyspark_ledger.datasource.options.source_options import LedgerSourceOptions
from pyspark_ledger.datasource.read.cuts import Cut, DataLossError, start_cut
from pyspark_ledger.datasource.read.log_view import HeadView
from pyspark_ledger.datasource.read.planning import (
    ranges_of,  # a batch read's ranges for one log: stream and batch read alike
)
from pyspark_ledger.datasource.read.ranges import LedgerRange, split_to_min_partitions
from pyspark_ledger.datasource.stream.offsets import LogOffset
from pyspark_ledger.log import Position

if TYPE_CHECKING:
    from pyspark_ledger.client import LedgerClient

log = logging.getLogger(__name__)

NEW_LOG = "the start of a log found after the stream began (logPattern)"
POSITION = "the stream's position"


def _lost(message: str, fail_on_data_loss: bool) -> None:
    if fail_on_data_loss:
        raise DataLossError(f"{message}. Set failOnDataLoss=false to read what remains")
    log.warning("data loss (failOnDataLoss=false, skipped): %s", message)


def read_to_its_end(view: HeadView, at: LogOffset) -> bool:
    """Whether `at` is the end of the newest trimmed ledger: the stream read all of it, so its
    trim lost nothing (the head keeps that ledger's entry count: metadata.log_trim_marks)."""
    b = log_trim_marks.boundary(view.head.record)
    return (b is not None and at.seq == b.seq == view.trim_seq - 1 and at.entry >= b.entry_count
            and at.ledger in ("", b.ledger))


def _start(view: HeadView, at: LogOffset, new: bool, fail_on_data_loss: bool) -> Cut | None:
    """Where this log's part of the batch starts, after the data-loss checks; None: nothing remains."""
    if read_to_its_end(view, at):
        return Cut(view.trim_seq, 0)
    found = view.at_or_after(at.seq)
    here = found is not None and found.seq == at.seq
    other = at.ledger and here and found is not None and found.ledger_id.qualified_name != at.ledger
    if other or at.seq > view.next_seq:
        now = f"seq {at.seq} is ledger {found.ledger_id.qualified_name}" if other and found is not None else \
            f"the log's next ledger gets seq {view.next_seq}"
        _lost(f"log {view.name!r}: the stream was at seq {at.seq} entry {at.entry} of ledger {at.ledger or '?'}, but "
              f"{now}: the log was deleted and made again, and what the stream had not read is gone", fail_on_data_loss)
        first = view.at_or_after(0)
        return None if first is None else Cut(first.seq, 0)
    lid = found.ledger_id if here and found is not None else \
        (LedgerId.from_qualified_name(at.ledger) if at.ledger else LedgerId(0, 0))
    bound = Bound("position", Position(at.seq, at.entry, lid))
    return start_cut(view, NEW_LOG if new else POSITION, bound, fail_on_data_loss)


def plan_batch(client: LedgerClient, opts: LedgerSourceOptions, start: Mapping[str, LogOffset],
               end: Mapping[str, LogOffset]) -> list[LedgerRange]:
    """The ranges of [start, end), log by log (names sorted), each in log order; a log in `end`
    but not in `start` (found after the stream began) is read from its beginning."""
    ranges: list[LedgerRange] = []
    for name in sorted(end):
        at, stop = start.get(name, LogOffset(0, 0)), end[name]
        if stop <= at:
            continue
        try:
            view = HeadView(client, client.logs.read_head(name)[0])
        except NoSuchLogError:
            _lost(f"log {name!r} was deleted before the stream read seq {at.seq} entry {at.entry} up to seq {stop.seq} "
                  f"entry {stop.entry}", opts.read.fail_on_data_loss)
            continue
        cut = _start(view, at, name not in start, opts.read.fail_on_data_loss)
        if cut is None:
            continue
        ranges_of(client, opts, name, view.ledgers(cut.seq), cut, Cut(stop.seq, stop.entry), ranges)
    return split_to_min_partitions(ranges, opts.read.min_partitions)
