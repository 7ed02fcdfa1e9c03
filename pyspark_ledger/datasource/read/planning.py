"""Read planning, on the driver: which entries of which ledgers of which logs a batch read returns.

The plan is fixed here, once: the logs are chosen (log, logs or logPattern), each one's start
and end are cut (cuts.py: positions, times, data loss), closed ledgers are read up to their
last entry, open ones up to the LAC a quorum of their bookies reports now (never past it), so a
read that runs while a producer appends returns a consistent prefix of each log. Each
(ledger, fragment) range becomes one or more LedgerRange values of at most
`max_entries_per_partition` entries (ranges.py), carrying the ledger's metadata (which pickles)
so executors need no metadata reads to find the replicas; minPartitions cuts them further.

A row's `timestamp` is its entry's own append time where the entry carries one (a timed Arrow
entry, protocol/arrow_times.py; a message batch, entry format 3), else the time its ledger
joined the log (LogLedger.ctime_ms): when a LogWriter rolled over to it, or when a Spark job's
or micro-batch's commit made it part of the log. Pushed `timestamp` filters prune the first kind
of ledger by its recorded append times (LogLedger.append_times_ms, read/time_filter.py: the
reader then filters its rows) and the second kind by its join time, exactly.

No pyspark here; source.py wraps ranges into Spark input partitions.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

from metadata import LedgerMetadata, MetadataError, NoSuchLedgerError
from metadata.log_record import MESSAGE_FORMAT_SINGLE, LogLedger, LogRecord
from metadata.log_segments import LogHead
from metadata.logs import NoSuchLogError
from pyspark_ledger.datasource.errors import LedgerSourceError, OptionError, did_you_mean
from pyspark_ledger.datasource.options.source_options import LedgerSourceOptions
from pyspark_ledger.datasource.read.cuts import Cut, DataLossError, end_cut, start_cut
from pyspark_ledger.datasource.read.log_view import HeadView
from pyspark_ledger.datasource.read.pushdown import PLACE_COLUMNS, PushedFilters
from pyspark_ledger.datasource.read.ranges import LedgerRange, Span, add_fragment_ranges, split_to_min_partitions
from pyspark_ledger.datasource.read.time_filter import TimeFilter, time_filter
from pyspark_ledger.datasource.rows import RowPlace
from pyspark_ledger.ledger.read_handle import ReadHandle
from pyspark_ledger.protocol.arrow_times import ledger_is_timed
from pyspark_ledger.protocol.entry_format import BATCH_FORMAT_VERSION, entry_format_of_ledger

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyspark_ledger.client import LedgerClient

__all__ = ["LedgerRange", "LedgerSourceError", "add_fragment_ranges", "plan_ranges", "shape_of"]

log = logging.getLogger(__name__)

# A plan names every range in the driver's memory and in Spark's task list: keep it bounded.
PARTITIONS_MAX = 100_000
# Names offered as "did you mean" for a missing log are looked up only in stores this small.
SUGGEST_FROM_LOGS_MAX = 10_000


def _known_logs(client: LedgerClient) -> list[str]:
    try:
        names = client.logs.names()
    except MetadataError:
        return []
    return names if len(names) <= SUGGEST_FROM_LOGS_MAX else []


def read_log_head(client: LedgerClient, opts: LedgerSourceOptions, name: str | None = None) -> LogHead:
    """The log's head: one read however long the log (its sealed ledgers stay in segments,
    fetched only for the positions a plan covers). A missing log names the closest existing one."""
    name = name if name is not None else opts.require_log("reading")
    try:
        return client.logs.read_head(name)[0]
    except NoSuchLogError:
        hint = did_you_mean(name, _known_logs(client))
        raise LedgerSourceError(f"no log named {name!r} in {opts.metadata_uri}{hint} (options log, logs)") from None


def read_log(client: LedgerClient, opts: LedgerSourceOptions) -> LogRecord:
    """The head view: the log's fields (format, schema, next_seq, trim point) and its tail."""
    return read_log_head(client, opts).record


def log_ledgers(client: LedgerClient, head: LogHead, from_seq: int = 0) -> Iterator[LogLedger]:
    """The log's ledgers from `from_seq` on, in order, each segment fetched only when reached."""
    return client.logs.iter_ledgers(head.record.name, head, from_seq)


def first_ledger(client: LedgerClient, head: LogHead, from_seq: int = 0) -> LogLedger | None:
    return next(log_ledgers(client, head, from_seq), None)


def select_logs(client: LedgerClient, opts: LedgerSourceOptions) -> list[str]:
    """The logs a read takes: the ones named, or every log whose whole name matches logPattern
    (sorted). None matching is an error: there would be no schema to read them with."""
    if opts.read.log_pattern is None:
        return list(opts.read.logs)
    names = sorted(n for n in client.logs.names() if re.fullmatch(opts.read.log_pattern, n))
    if not names:
        raise LedgerSourceError(f"no log in {opts.metadata_uri} matches logPattern "
                                f"{opts.read.log_pattern!r} (the pattern must match a whole name)")
    return names


class SourceShape:
    """What a read returns: the payload format and, for Arrow logs, the written columns' Spark
    schema as JSON (None for raw, or for a single Arrow ledger whose schema comes from entry 0);
    `batched`: the log may hold message batches (entry format 3, raw logs only)."""

    __slots__ = ("batched", "payload_format", "schema_json")

    def __init__(self, payload_format: str, schema_json: str | None, batched: bool = False):
        self.payload_format = payload_format
        self.schema_json = schema_json
        self.batched = batched


def log_shape(rec: LogRecord, opts: LedgerSourceOptions) -> SourceShape:
    fmt = opts.payload_format or rec.payload_format
    batched = rec.message_format != MESSAGE_FORMAT_SINGLE
    if batched and fmt != "raw":
        # Batches (entry format 3) hold raw messages: a LogWriter's or a raw Spark write's.
        raise LedgerSourceError(
            f"log {rec.name!r} holds batched messages (message format {rec.message_format!r}), which are raw "
            "messages: read it with payloadFormat raw (or without the option)")
    if fmt == "arrow" and rec.payload_format != "arrow":
        raise LedgerSourceError(f"log {rec.name!r} holds raw entries, not Arrow (option payloadFormat)")
    if fmt == "arrow" and rec.schema is None:
        raise LedgerSourceError(f"Arrow log {rec.name!r} has no recorded schema yet (nothing was written)")
    # A raw log records a schema only when its entries carry keys (key, payload: write_columns.py).
    return SourceShape(fmt, rec.schema if fmt == "arrow" or rec.payload_format == "raw" else None, batched)


def shape_of(client: LedgerClient, opts: LedgerSourceOptions) -> SourceShape:
    """The payload format (an explicit payloadFormat wins; else what the logs recorded) and schema;
    several logs must agree on both."""
    if opts.ledger is not None:
        return SourceShape(opts.payload_format or "raw", None)
    first: tuple[str, SourceShape] | None = None
    for name in select_logs(client, opts):
        shape = log_shape(read_log_head(client, opts, name).record, opts)
        if first is None:
            first = (name, shape)
        elif (shape.payload_format, shape.schema_json) != (first[1].payload_format, first[1].schema_json):
            what = "payload formats" if shape.payload_format != first[1].payload_format else "schemas"
            raise LedgerSourceError(f"logs {first[0]!r} and {name!r} have different {what} "
                                    f"({first[1].schema_json or first[1].payload_format} and "
                                    f"{shape.schema_json or shape.payload_format}): read them in separate queries")
    assert first is not None  # select_logs returns at least one log
    return first[1]  # (a read of several logs plans each by its own message format: plan_log)


def last_readable(client: LedgerClient, meta: LedgerMetadata, version: int, opts: LedgerSourceOptions) -> int:
    if meta.is_closed:
        return meta.last_entry_id  # type: ignore[return-value]  # closed: it has an end
    handle = ReadHandle(client.context, meta, version, opts.password)
    try:
        return handle.last_add_confirmed()
    finally:
        handle.close()


def _span(seq: int, last: int, start: Cut, end: Cut | None) -> Span | None:
    """The entries of ledger `seq` (readable to `last`) inside [start, end), or None."""
    first, skip = (start.entry, start.index) if seq == start.seq else (0, 0)
    keep = None
    if end is not None and seq == end.seq:
        if end.index:
            last, keep = min(last, end.entry), (end.index if last >= end.entry else None)
        else:
            last = min(last, end.entry - 1)
    if last < first or (first == last and keep is not None and keep <= skip):
        return None
    return Span(first, last, skip, keep)


def _ledger_meta(client: LedgerClient, opts: LedgerSourceOptions, name: str | None, lg: LogLedger
                 ) -> tuple[LedgerMetadata, int] | None:
    """A ledger's metadata and version; None (after a warning) when it is gone and data loss is allowed."""
    try:
        meta, version = client.ledgers.read(lg.ledger_id)
    except NoSuchLedgerError:
        if name is None:
            raise LedgerSourceError(f"no ledger {lg.ledger_id} in {opts.metadata_uri} (option ledger)") from None
        message = f"log {name!r}: ledger {lg.ledger_id} (seq {lg.seq}) is listed but gone (deleted: trimmed while planning?)"
        if opts.read.fail_on_data_loss:
            raise DataLossError(f"{message}. Set failOnDataLoss=false to skip it") from None
        log.warning("data loss (failOnDataLoss=false, skipped): %s", message)
        return None
    if not meta.check_password(opts.password):
        what = f"log {name!r} (ledger {lg.ledger_id})" if name is not None else f"ledger {lg.ledger_id}"
        raise OptionError("password", f"wrong password for {what}: give the one it was written with "
                          "(option password or password_file)")
    return meta, version


def _raw_span(span: Span, batched: bool) -> Span | None:
    """A raw ledger's span as read: a format-2 entry is one row, so a cut inside one (a
    position's index, from a batched log's other ledgers) is the cut after it."""
    if batched:
        return span
    first = span.first + 1 if span.skip_rows else span.first
    return Span(first, span.last) if first <= span.last else None


def shows_own_times(meta: LedgerMetadata, fmt: str) -> bool:
    """Whether a read in `fmt` shows this ledger's rows with times of their own (its timed Arrow
    entries' or its message batches'), not its join time."""
    if fmt == "arrow":
        return ledger_is_timed(meta.custom)
    return entry_format_of_ledger(meta.custom) == BATCH_FORMAT_VERSION


class Pruning:
    """The pushed filters as planning applies them to one log's ledgers. `bounded`: the log's
    recorded append times (LogLedger.append_times_ms) bound the rows' times as this read shows
    them (its payload format is the log's own; never for a lone ledger)."""

    __slots__ = ("bounded", "pushed", "times")

    def __init__(self, pushed: PushedFilters, bounded: bool):
        self.pushed = pushed
        self.times: TimeFilter = time_filter(pushed.conditions)
        self.bounded = bounded

    def keeps(self, place: RowPlace, lg: LogLedger, own_times: bool | None) -> bool:
        """Whether the ledger's rows may pass (`own_times` None: not known yet, before its
        metadata is read). Rows that share the join time are decided exactly; rows with times of
        their own by the recorded times (kept without them), and the reader filters each row."""
        if own_times is False or not self.times:
            return self.pushed.keeps_ledger(place)
        recorded = lg.append_times_ms if self.bounded else None
        return self.pushed.keeps_ledger(place, PLACE_COLUMNS) and self.times.may_hold(recorded)


def ranges_of(client: LedgerClient, opts: LedgerSourceOptions, name: str | None, ledgers: Iterator[LogLedger],
              start: Cut, end: Cut | None, out: list[LedgerRange], fmt: str = "arrow",
              pushed: PushedFilters | None = None, own_times: bool = True) -> None:
    """`own_times`: some ledgers of this log may show rows with times of their own (False: every
    row shows its ledger's join time, so a timestamp filter is decided before any metadata read)."""
    pruning = Pruning(pushed, bounded=name is not None and own_times) if pushed is not None else None
    for lg in ledgers:
        if lg.seq < start.seq:
            continue
        if end is not None and (lg.seq > end.seq or (lg.seq == end.seq and end.entry == 0 and end.index == 0)):
            break
        if name is not None and pruning is not None and not pruning.keeps(
                RowPlace(name, lg.seq, lg.ledger_id.qualified_name, lg.ctime_ms), lg, None if own_times else False):
            continue  # filtered out whole, before its metadata is even read
        found = _ledger_meta(client, opts, name, lg)
        if found is None:
            continue
        meta, version = found
        place = RowPlace(name, lg.seq if name is not None else None, lg.ledger_id.qualified_name,
                         lg.ctime_ms if name is not None else meta.ctime_ms)
        span = _span(lg.seq, last_readable(client, meta, version, opts), start, end)
        if span is not None and fmt == "raw":
            span = _raw_span(span, entry_format_of_ledger(meta.custom) == BATCH_FORMAT_VERSION)
        if span is not None and pruning is not None:
            kept = pruning.keeps(place, lg, shows_own_times(meta, fmt))
            span = pruning.pushed.cut_span(span) if kept else None
        if span is None:
            continue
        add_fragment_ranges(out, lg.seq, lg.ledger_id, meta, version, span, opts.max_entries_per_partition, place,
                            limit=PARTITIONS_MAX)


def bound_option(opts: LedgerSourceOptions, which: str, name: str) -> str:
    """The option a log's bound came from, for messages."""
    by_log = opts.read.starting_by_log if which == "starting" else opts.read.ending_by_log
    bound = opts.read.starting if which == "starting" else opts.read.ending
    if name in dict(by_log):
        return f"{which}Positions"
    return f"{which}Timestamp" if bound.kind == "timestamp" else f"{which}Position"


def plan_log(client: LedgerClient, opts: LedgerSourceOptions, name: str, fmt: str, out: list[LedgerRange],
             pushed: PushedFilters | None = None) -> None:
    """Append the ranges of one log's read. Of a log, only the segments covering it are fetched
    (from the pushed filters' lowest seq on, when they have one)."""
    view = HeadView(client, read_log_head(client, opts, name), opts.password)
    start = start_cut(view, bound_option(opts, "starting", name), opts.read.starting_for(name),
                      opts.read.fail_on_data_loss)
    end = end_cut(view, bound_option(opts, "ending", name), opts.read.ending_for(name))
    batched = view.head.record.message_format != MESSAGE_FORMAT_SINGLE
    if fmt == "raw" and not batched:  # every entry one row (a batched log's ledgers: ranges_of)
        start = start.for_raw() if start is not None else None
        end = end.for_raw() if end is not None else None
    if start is not None and pushed is not None and pushed.seq_floor() > start.seq:
        start = Cut(pushed.seq_floor(), 0)
    if start is None or (end is not None and end <= start):
        return  # starts after the end (latest, a later time) or ends before the start: empty
    # Rows with times of their own: a timed Arrow ledger's, a batched raw log's batches (read raw).
    own_times = fmt == view.head.record.payload_format and (fmt == "arrow" or batched)
    ranges_of(client, opts, name, view.ledgers(start.seq), start, end, out, fmt, pushed, own_times)


def _plan_ledger(client: LedgerClient, opts: LedgerSourceOptions, fmt: str, out: list[LedgerRange],
                 pushed: PushedFilters | None = None) -> None:
    """One ledger outside any log: positions in it use seq 0."""
    assert opts.ledger is not None
    if opts.starting.kind == "latest" or opts.ending.kind == "earliest":
        return
    start = Cut(0, 0) if opts.starting.position is None else Cut(opts.starting.position.seq,
                                                                  opts.starting.position.entry_id, opts.starting.index)
    end = None if opts.ending.position is None else Cut(opts.ending.position.seq, opts.ending.position.entry_id,
                                                        opts.ending.index)
    if fmt == "raw":
        start, end = start.for_raw(), (end.for_raw() if end is not None else None)
    ranges_of(client, opts, None, iter([LogLedger(0, opts.ledger, 0)]), start, end, out, pushed=pushed)


def first_entry_range(client: LedgerClient, opts: LedgerSourceOptions) -> LedgerRange | None:
    """Entry 0 of the lone ledger a read names (option ledger), checked as a read checks it (it
    exists, the password fits), for reader.arrow_schema_of; None when it has no readable entry."""
    assert opts.ledger is not None
    out: list[LedgerRange] = []
    ranges_of(client, opts, None, iter([LogLedger(0, opts.ledger, 0)]), Cut(0, 0), Cut(0, 1), out)
    return out[0] if out else None


def plan_ranges(client: LedgerClient, opts: LedgerSourceOptions, payload_format: str | None = None,
                pushed: PushedFilters | None = None) -> list[LedgerRange]:
    """The ranges a batch read covers: log by log (in the order named, or sorted for a pattern),
    each in log order, without what the pushed filters rule out; then cut to at least minPartitions."""
    fmt = payload_format or shape_of(client, opts).payload_format
    ranges: list[LedgerRange] = []
    if opts.ledger is not None:
        _plan_ledger(client, opts, fmt, ranges, pushed)
    else:
        for name in select_logs(client, opts):
            plan_log(client, opts, name, fmt, ranges, pushed)
    ranges = split_to_min_partitions(ranges, opts.read.min_partitions)
    if len(ranges) > PARTITIONS_MAX:
        raise OptionError("minPartitions", f"the read would need more than {PARTITIONS_MAX} partitions; lower it")
    log.info("read planned target=%s ranges=%d entries=%d", opts.target, len(ranges), sum(r.entries for r in ranges))
    return ranges
