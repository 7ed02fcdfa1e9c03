"""Read planning, on the driver: which entries of which ledgers of which logs a batch read returns.

The plan is fixed here, once: the logs are chosen (log, logs or logPattern), each one's start
and end are cut (cuts.py: positions, times, data loss), closed ledgers are read up to their
last entry, open ones up to the LAC a quorum of their bookies reports now (never past it), so a
read that runs while a producer appends returns a consistent prefix of each log. Each
(ledger, fragment) range becomes one or more LedgerRange values of at most
`max_entries_per_partition` entries (ranges.py), carrying the ledger's metadata (which pickles)
so executors need no metadata reads to find the replicas; minPartitions cuts them further.

Every row's `timestamp` is the time its ledger joined the log (LogLedger.ctime_ms): when a
LogWriter rolled over to it (its entries were appended from then until the ledger was sealed),
or when a Spark job's or micro-batch's commit made it part of the log (its rows became readable
then). No entry carries a time of its own (the entry format has none), so that is the
granularity: a ledger.

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
from pyspark_ledger.datasource.read.ranges import LedgerRange, Span, add_fragment_ranges, split_to_min_partitions
from pyspark_ledger.datasource.rows import RowPlace
from pyspark_ledger.ledger.read_handle import ReadHandle

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
    schema as JSON (None for raw, or for a single Arrow ledger whose schema comes from entry 0)."""

    __slots__ = ("payload_format", "schema_json")

    def __init__(self, payload_format: str, schema_json: str | None):
        self.payload_format = payload_format
        self.schema_json = schema_json


def log_shape(rec: LogRecord, opts: LedgerSourceOptions) -> SourceShape:
    if rec.message_format != MESSAGE_FORMAT_SINGLE:
        # Batched messages (entry format 3) are read by LogReader and `ledger logs read`; this
        # source reads one message per entry and must not hand a batch's framing over as a row.
        raise LedgerSourceError(
            f"log {rec.name!r} holds batched messages (message format {rec.message_format!r}): this Spark source "
            "reads logs of one message per entry only; read it with LogReader or `ledger logs read`, or write it "
            "with open_log_writer(..., batching=False)")
    fmt = opts.payload_format or rec.payload_format
    if fmt == "arrow" and rec.payload_format != "arrow":
        raise LedgerSourceError(f"log {rec.name!r} holds raw entries, not Arrow (option payloadFormat)")
    if fmt == "arrow" and rec.schema is None:
        raise LedgerSourceError(f"Arrow log {rec.name!r} has no recorded schema yet (nothing was written)")
    # A raw log records a schema only when its entries carry keys (key, payload: write/columns.py).
    return SourceShape(fmt, rec.schema if fmt == "arrow" or rec.payload_format == "raw" else None)


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
    return first[1]


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


def ranges_of(client: LedgerClient, opts: LedgerSourceOptions, name: str | None, ledgers: Iterator[LogLedger],
               start: Cut, end: Cut | None, out: list[LedgerRange]) -> None:
    for lg in ledgers:
        if lg.seq < start.seq:
            continue
        if end is not None and (lg.seq > end.seq or (lg.seq == end.seq and end.entry == 0 and end.index == 0)):
            break
        found = _ledger_meta(client, opts, name, lg)
        if found is None:
            continue
        meta, version = found
        span = _span(lg.seq, last_readable(client, meta, version, opts), start, end)
        if span is None:
            continue
        place = RowPlace(name, lg.seq if name is not None else None, lg.ledger_id.qualified_name,
                         lg.ctime_ms if name is not None else meta.ctime_ms)
        add_fragment_ranges(out, lg.seq, lg.ledger_id, meta, version, span, opts.max_entries_per_partition, place,
                            limit=PARTITIONS_MAX)


def bound_option(opts: LedgerSourceOptions, which: str, name: str) -> str:
    """The option a log's bound came from, for messages."""
    by_log = opts.read.starting_by_log if which == "starting" else opts.read.ending_by_log
    bound = opts.read.starting if which == "starting" else opts.read.ending
    if name in dict(by_log):
        return f"{which}Positions"
    return f"{which}Timestamp" if bound.kind == "timestamp" else f"{which}Position"


def plan_log(client: LedgerClient, opts: LedgerSourceOptions, name: str, fmt: str, out: list[LedgerRange]) -> None:
    """Append the ranges of one log's read. Of a log, only the segments covering it are fetched."""
    view = HeadView(client, read_log_head(client, opts, name))
    start = start_cut(view, bound_option(opts, "starting", name), opts.read.starting_for(name),
                      opts.read.fail_on_data_loss)
    end = end_cut(view, bound_option(opts, "ending", name), opts.read.ending_for(name))
    if fmt == "raw":
        start = start.for_raw() if start is not None else None
        end = end.for_raw() if end is not None else None
    if start is None or (end is not None and end <= start):
        return  # starts after the end (latest, a later time) or ends before the start: empty
    ranges_of(client, opts, name, view.ledgers(start.seq), start, end, out)


def _plan_ledger(client: LedgerClient, opts: LedgerSourceOptions, fmt: str, out: list[LedgerRange]) -> None:
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
    ranges_of(client, opts, None, iter([LogLedger(0, opts.ledger, 0)]), start, end, out)


def first_entry_range(client: LedgerClient, opts: LedgerSourceOptions) -> LedgerRange | None:
    """Entry 0 of the lone ledger a read names (option ledger), checked as a read checks it (it
    exists, the password fits), for reader.arrow_schema_of; None when it has no readable entry."""
    assert opts.ledger is not None
    out: list[LedgerRange] = []
    ranges_of(client, opts, None, iter([LogLedger(0, opts.ledger, 0)]), Cut(0, 0), Cut(0, 1), out)
    return out[0] if out else None


def plan_ranges(client: LedgerClient, opts: LedgerSourceOptions, payload_format: str | None = None) -> list[LedgerRange]:
    """The ranges a batch read covers: log by log (in the order named, or sorted for a pattern),
    each in log order; then cut to at least minPartitions."""
    fmt = payload_format or shape_of(client, opts).payload_format
    ranges: list[LedgerRange] = []
    if opts.ledger is not None:
        _plan_ledger(client, opts, fmt, ranges)
    else:
        for name in select_logs(client, opts):
            plan_log(client, opts, name, fmt, ranges)
    ranges = split_to_min_partitions(ranges, opts.read.min_partitions)
    if len(ranges) > PARTITIONS_MAX:
        raise OptionError("minPartitions", f"the read would need more than {PARTITIONS_MAX} partitions; lower it")
    log.info("read planned target=%s ranges=%d entries=%d", opts.target, len(ranges), sum(r.entries for r in ranges))
    return ranges
