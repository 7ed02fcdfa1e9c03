"""The stream source on the driver: where a stream starts, where each micro-batch ends, and how
far behind each log's readable end it is. No pyspark here: source.py is the glue.

Logs: those named (`log`, `logs`), or every log matching `logPattern`. A log that starts matching
after the query started (a new log) joins the stream from its beginning, as Kafka's
subscribePattern takes new partitions from their earliest offset: it is looked for at every
trigger, once it has a ledger, and must hold the stream's payload format and schema.

Starts (Spark asks once, for a new query; a restart goes on from the checkpoint): per log, after
its `subscription`'s position when the option names one the log has (stream/subscription.py),
else its `startingPositions` entry, else `startingPosition`, else `startingTimestamp`, else
`earliest` (options/read.py, read/cuts.py: the same checks and data-loss rules as a batch read). A stream
starts at an entry: `latest` is the log's readable end when the query starts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from metadata.log_segments import LogHead
from metadata.logs import NoSuchLogError
from pyspark_ledger.datasource.errors import LedgerSourceError, OptionError
from pyspark_ledger.datasource.options.source_options import LedgerSourceOptions
from pyspark_ledger.datasource.read.cuts import DataLossError, start_cut
from pyspark_ledger.datasource.read.log_view import HeadView
from pyspark_ledger.datasource.read.planning import (
    SourceShape,
    bound_option,  # planning's option naming: messages agree
    log_shape,  # the shape check of batch reads, also for logs found later
    read_log_head,
    select_logs,
)
from pyspark_ledger.datasource.stream.admission import Limit, admit, lag_after, offset_after
from pyspark_ledger.datasource.stream.offsets import LogOffset, StreamOffset
from pyspark_ledger.datasource.stream.scan import LogScan, scan_log, tail_of
from pyspark_ledger.datasource.stream.subscription import subscription_start

if TYPE_CHECKING:
    from pyspark_ledger.client import LedgerClient

log = logging.getLogger(__name__)


def _start_of(client: LedgerClient, opts: LedgerSourceOptions, head: LogHead, fmt: str) -> LogOffset:
    name = head.record.name
    bound = opts.read.starting_for(name)
    if bound.kind == "latest":
        return tail_of(client, opts, head)
    view = HeadView(client, head)
    option = bound_option(opts, "starting", name)
    if bound.kind == "position" and bound.index and fmt != "raw":
        raise OptionError(option, f"log {name!r}: a stream of Arrow entries starts at an entry (index 0), "
                          f"not inside one (index {bound.index})")
    cut = start_cut(view, option, bound, opts.read.fail_on_data_loss)
    if cut is not None and fmt == "raw":
        cut = cut.for_raw()
    if cut is None:  # a time after every ledger, or nothing remains: the next ledger appended
        return LogOffset(view.next_seq, 0)
    first = view.at_or_after(cut.seq)
    if first is None:
        return LogOffset(max(cut.seq, view.next_seq), 0)
    if first.seq != cut.seq:  # earliest: the first ledger that remains
        return LogOffset(first.seq, 0, first.ledger_id.qualified_name)
    return LogOffset(cut.seq, cut.entry, first.ledger_id.qualified_name)


def initial_offsets(client: LedgerClient, opts: LedgerSourceOptions, fmt: str,
                    subscription: str | None = None) -> StreamOffset:
    """Where a new query starts, per log: after its `subscription`'s position when the log has
    that subscription (stream/subscription.py), else by the starting options."""
    out: StreamOffset = {}
    for name in select_logs(client, opts):
        at = None if subscription is None else \
            subscription_start(client, name, subscription, opts.read.fail_on_data_loss)
        out[name] = at if at is not None else _start_of(client, opts, read_log_head(client, opts, name), fmt)
    return out


def _gone(name: str, at: LogOffset, fail_on_data_loss: bool) -> None:
    message = (f"log {name!r} was deleted while the stream read it (the stream was at seq {at.seq} entry {at.entry}; "
               "what it had not read is lost)")
    if fail_on_data_loss:
        raise DataLossError(f"{message}. Set failOnDataLoss=false to go on without it")
    log.warning("data loss (failOnDataLoss=false, skipped): %s", message)


def _heads(client: LedgerClient, opts: LedgerSourceOptions, start: Mapping[str, LogOffset],
           shape: SourceShape) -> dict[str, tuple[LogHead, LogOffset]]:
    """Each log of this trigger with its head and where the stream is in it: the logs of the
    start offset (a deleted one is data loss), then new logs matching logPattern."""
    out: dict[str, tuple[LogHead, LogOffset]] = {}
    for name, at in start.items():
        try:
            out[name] = (client.logs.read_head(name)[0], at)
        except NoSuchLogError:
            _gone(name, at, opts.read.fail_on_data_loss)
    if opts.read.log_pattern is None:
        return out
    # Listed here rather than by select_logs: a running stream whose logs all went is no option mistake.
    for name in sorted(n for n in client.logs.names() if opts.read.includes(n) and n not in start):
        try:
            head = client.logs.read_head(name)[0]
        except NoSuchLogError:
            continue
        if not head.record.ledgers and head.seg_next == head.seg_first:
            continue  # no ledger yet: its format and schema are not known
        found = log_shape(head.record, opts)
        if (found.payload_format, found.schema_json) != (shape.payload_format, shape.schema_json):
            raise LedgerSourceError(f"log {name!r} matches logPattern {opts.read.log_pattern!r} but holds "
                                    f"{found.schema_json or found.payload_format}, not the stream's "
                                    f"{shape.schema_json or shape.payload_format}: narrow the pattern")
        log.info("stream picks up a new log matching logPattern log=%s", name)
        out[name] = (head, LogOffset(0, 0))  # from its beginning; planning checks nothing was trimmed
    return out


@dataclass(frozen=True, slots=True)
class NextBatch:
    end: StreamOffset
    scans: dict[str, LogScan]
    taken: dict[str, int]

    def report(self) -> dict[str, Any]:
        """Spark's latestOffset in the query's progress: per log, the readable end, and the lag
        after this batch: entries and bytes not read yet."""
        out: dict[str, Any] = {}
        for name in sorted(self.scans):
            scan = self.scans[name]
            entries, size = lag_after(scan, self.taken.get(name, 0))
            out[name] = {**scan.tail.to_dict(), "lagEntries": entries, "lagBytes": size, "complete": scan.complete}
        return out


def _clamped(end: LogOffset, start: LogOffset, target: LogOffset | None) -> LogOffset:
    if target is None or end <= target:
        return end
    return max(start, target)


def next_batch(client: LedgerClient, opts: LedgerSourceOptions, shape: SourceShape, start: Mapping[str, LogOffset],
               limit: Limit, target: Mapping[str, LogOffset] | None) -> NextBatch:
    """The end of the next micro-batch, per log, within the limit (and Trigger.AvailableNow's
    target); a log it takes nothing of keeps its position, so no data means end == start."""
    heads = _heads(client, opts, start, shape)
    if target is not None:  # AvailableNow reads nothing of logs that appeared after it began
        heads = {name: got for name, got in heads.items() if name in target}
    scans = {name: scan_log(client, opts, head, at) for name, (head, at) in heads.items()}
    # What this run may read; the lag reported stays the distance to each log's readable end.
    readable = scans if target is None else {name: _within(scan, target[name]) for name, scan in scans.items()}
    taken = admit(readable, limit)
    end: StreamOffset = {}
    for name, (_, at) in heads.items():
        n = taken.get(name, 0)
        if name in start or n:
            end[name] = _clamped(offset_after(readable[name], n), at, None if target is None else target.get(name))
    return NextBatch(end, scans, taken)


def _within(scan: LogScan, target: LogOffset) -> LogScan:
    """The scan cut at the target: what AvailableNow may still read."""
    kept = []
    for c in scan.chunks:
        if (c.seq, c.first) >= (target.seq, target.entry):
            break
        if c.seq == target.seq and c.last >= target.entry:
            n = target.entry - c.first
            kept.append(replace(c, last=target.entry - 1, bytes=c.bytes_of(n), after=target))
            break
        kept.append(c)
    return replace(scan, chunks=tuple(kept))


def available_now_target(client: LedgerClient, opts: LedgerSourceOptions) -> StreamOffset:
    """Trigger.AvailableNow's end: each log's readable end now."""
    return {name: tail_of(client, opts, read_log_head(client, opts, name)) for name in select_logs(client, opts)}


def single_log(opts: LedgerSourceOptions) -> str | None:
    """The log of a one-log stream (an old checkpoint's offset is that log's)."""
    return opts.read.logs[0] if opts.read.log_pattern is None and len(opts.read.logs) == 1 else None


__all__ = ["NextBatch", "available_now_target", "initial_offsets", "next_batch", "single_log"]
