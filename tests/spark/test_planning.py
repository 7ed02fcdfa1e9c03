"""Read planning without a JVM or a cluster (issue 22): cuts from positions and times, data
loss, the entries and rows of each ledger a plan reads, and minPartitions."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from metadata import LedgerId, LedgerMetadata, QuorumConfig, Segment
from metadata.log_record import LogLedger
from pyspark_ledger.datasource.errors import OptionError
from pyspark_ledger.datasource.options.positions import Bound, parse_bound, parse_timestamp
from pyspark_ledger.datasource.read.cuts import Cut, DataLossError, end_cut, start_cut
from pyspark_ledger.datasource.read.planning import _span
from pyspark_ledger.datasource.read.ranges import LedgerRange, Span, add_fragment_ranges, split_to_min_partitions
from pyspark_ledger.datasource.rows import RowPlace
from pyspark_ledger.log import Position


@dataclass
class FakeLog:
    """cuts.LogLedgers over a list: ledgers seq 2..6 at times 1000, 2000, ... (0 and 1 trimmed)."""

    name: str = "events"
    trim_seq: int = 2
    next_seq: int = 7
    ledgers: list[LogLedger] = field(default_factory=lambda: [
        LogLedger(seq, LedgerId(0, 100 + seq), 1000 * (seq - 1)) for seq in (2, 3, 5, 6)])  # seq 4 deleted

    def at_or_after(self, seq: int) -> LogLedger | None:
        return next((lg for lg in self.ledgers if lg.seq >= seq), None)

    def first_at_or_after_time(self, ms: int) -> LogLedger | None:
        return next((lg for lg in self.ledgers if lg.ctime_ms >= ms), None)


def at(seq: int, entry: int, index: int = 0) -> Bound:
    return Bound("position", Position(seq, entry, LedgerId(0, 100 + seq)), index)


def test_earliest_latest_and_positions() -> None:
    log = FakeLog()
    assert start_cut(log, "startingPosition", Bound("earliest"), True) == Cut(0, 0)
    assert start_cut(log, "startingPosition", Bound("latest"), True) is None  # a batch from latest is empty
    assert start_cut(log, "startingPosition", at(3, 7, 2), True) == Cut(3, 7, 2)
    assert start_cut(log, "startingPosition", at(7, 0), True) == Cut(7, 0)  # the end of the log: empty, no loss
    assert end_cut(log, "endingPosition", Bound("latest")) is None
    assert end_cut(log, "endingPosition", at(5, 3, 1)) == Cut(5, 3, 1)


def test_times_cut_before_the_first_ledger_that_joined_at_or_after_them() -> None:
    log = FakeLog()  # times: seq 2 -> 1000, 3 -> 2000, 5 -> 4000, 6 -> 5000
    assert start_cut(log, "startingTimestamp", parse_timestamp("2000"), True) == Cut(3, 0)
    assert start_cut(log, "startingTimestamp", parse_timestamp("2001"), True) == Cut(5, 0)
    assert start_cut(log, "startingTimestamp", parse_timestamp("9000"), True) is None
    assert end_cut(log, "endingTimestamp", parse_timestamp("4000")) == Cut(5, 0)
    assert end_cut(log, "endingTimestamp", parse_timestamp("9000")) is None  # after every ledger: no bound


def test_a_trimmed_or_deleted_start_fails_saying_what_is_gone_or_skips() -> None:
    log = FakeLog()
    with pytest.raises(DataLossError) as err:
        start_cut(log, "startingPositions", at(1, 9), True)
    assert str(err.value).splitlines()[0] == (
        "log 'events': the read starts at seq 1 entry 9 (startingPositions), but ledgers with seq below 2 were trimmed "
        "(data lost: seq 1 entry 9 up to seq 2); the next data is at seq 2 entry 0. Set failOnDataLoss=false to read "
        "what remains")
    with pytest.raises(DataLossError, match="the ledger with seq 4 is no longer in the log"):
        start_cut(log, "startingPosition", at(4, 0), True)
    assert start_cut(log, "startingPosition", at(1, 9), False) == Cut(2, 0)
    assert start_cut(log, "startingPosition", at(4, 3), False) == Cut(5, 0)
    gone = FakeLog(ledgers=[])
    assert start_cut(gone, "startingPosition", at(4, 3), False) is None


def test_a_position_must_name_the_ledger_at_its_seq_and_lie_in_the_log() -> None:
    log = FakeLog()
    wrong = Bound("position", Position(3, 0, LedgerId(0, 999)))
    with pytest.raises(OptionError, match="names ledger .* but seq 3 of the log is ledger"):
        start_cut(log, "startingPosition", wrong, True)
    with pytest.raises(OptionError, match="past the end of the log"):
        end_cut(log, "endingPosition", at(9, 0))


def test_raw_entries_are_one_row_each() -> None:
    assert Cut(3, 7, 1).for_raw() == Cut(3, 8) and Cut(3, 7).for_raw() == Cut(3, 7)


@pytest.mark.parametrize(
    "seq, last, start, end, span",
    [
        (3, 99, Cut(0, 0), None, Span(0, 99)),
        (3, 99, Cut(3, 10, 2), None, Span(10, 99, 2)),  # starts inside entry 10
        (3, 99, Cut(3, 10), Cut(3, 20), Span(10, 19)),  # the end is exclusive
        (3, 99, Cut(3, 10), Cut(3, 20, 5), Span(10, 20, 0, 5)),  # ... and may cut inside entry 20
        (3, 15, Cut(3, 10), Cut(3, 20, 5), Span(10, 15)),  # entry 20 is not readable yet
        (3, 99, Cut(3, 20, 5), Cut(3, 20, 5), None),
        (3, 99, Cut(3, 20, 2), Cut(3, 20, 5), Span(20, 20, 2, 5)),
        (3, 99, Cut(3, 120), None, None),  # past the readable end
        (4, 99, Cut(3, 10, 2), Cut(5, 0), Span(0, 99)),  # a ledger in between: whole
    ],
)
def test_span_of_a_ledger(seq: int, last: int, start: Cut, end: Cut | None, span: Span | None) -> None:
    assert _span(seq, last, start, end) == span


def meta(entries_per_fragment: int, fragments: int) -> LedgerMetadata:
    m = LedgerMetadata.new(LedgerId(0, 42), QuorumConfig(3, 3, 2), ["a:1", "b:1", "c:1"])
    segs = tuple(Segment(i * entries_per_fragment, (f"b{i}:1", "x:1", "y:1")) for i in range(fragments))
    return replace(m, segments=segs)


PLACE = RowPlace("events", 3, LedgerId(0, 42).qualified_name, 1000)


def plan(span: Span, max_entries: int, fragments: int = 2) -> list[LedgerRange]:
    out: list[LedgerRange] = []
    add_fragment_ranges(out, 3, LedgerId(0, 42), meta(100, fragments), 1, span, max_entries, PLACE)
    return out


def test_row_limits_stay_with_the_first_and_last_entries_when_ranges_are_cut() -> None:
    ranges = plan(Span(10, 150, 4, 7), max_entries=50)
    got = [(r.first_entry_id, r.last_entry_id, r.ensemble[0], r.skip_rows, r.keep_rows, r.index) for r in ranges]
    assert got == [(10, 59, "b0:1", 4, None, 0), (60, 99, "b0:1", 0, None, 1), (100, 149, "b1:1", 0, None, 2),
                   (150, 150, "b1:1", 0, 7, 3)]
    assert ranges[0].rows_of(10) == (4, None) and ranges[0].rows_of(11) == (0, None) and ranges[3].rows_of(150) == (0, 7)
    with pytest.raises(OptionError, match="maxEntriesPerPartition"):
        add_fragment_ranges([], 3, LedgerId(0, 42), meta(100, 2), 1, Span(0, 150), 1, PLACE, limit=100)


def test_min_partitions_cuts_large_ranges_and_keeps_row_limits() -> None:
    ranges = plan(Span(0, 199, 3, 5), max_entries=1000)  # one range per fragment: 100 + 100 entries
    assert len(ranges) == 2 and split_to_min_partitions(ranges, None) is ranges
    assert split_to_min_partitions(ranges, 2) is ranges  # already enough
    cut = split_to_min_partitions(ranges, 8)
    assert len(cut) >= 8 and [r.index for r in cut] == list(range(len(cut)))
    assert sum(r.entries for r in cut) == 200 and max(r.entries for r in cut) <= 200 // 8
    covered = [e for r in cut for e in range(r.first_entry_id, r.last_entry_id + 1)]
    assert covered == list(range(200))
    assert [(r.skip_rows, r.keep_rows) for r in cut if (r.skip_rows, r.keep_rows) != (0, None)] == [(3, None), (0, 5)]
    assert (cut[0].skip_rows, cut[-1].keep_rows) == (3, 5)
    tiny = plan(Span(0, 2), max_entries=1000, fragments=1)
    assert len(split_to_min_partitions(tiny, 10)) == 3  # an entry is never split


def test_parse_bound_words_are_case_insensitive() -> None:
    assert parse_bound(" Latest ") == Bound("latest")
