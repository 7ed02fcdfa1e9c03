"""The reading options of `format("ledger")`: which logs, from where to where, how split, and
what missing data means. Parsed once on the driver into a frozen value; no I/O, no pyspark.

Which logs: exactly one of `log` (or the load path), `logs` (comma-separated names) and
`logPattern` (a regular expression that must match a whole log name, as Kafka's
subscribePattern), or `ledger` for one ledger outside any log.

Bounds (positions.py): `startingPosition` / `endingPosition` hold for every log read (a JSON
position only when exactly one log is named), `startingPositions` / `endingPositions` per log
(the others take the single option's earliest/latest, else earliest/latest), or
`startingTimestamp` / `endingTimestamp` for every log. One way per end.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from metadata import InvalidMetadataError
from metadata.paths import check_name
from pyspark_ledger.datasource.errors import OptionError, did_you_mean
from pyspark_ledger.datasource.options.positions import (
    Bound,
    BoundError,
    parse_bound,
    parse_log_bounds,
    parse_timestamp,
)
from pyspark_ledger.datasource.options.values import int_option, text_option

# More Spark partitions than a plan may hold (planning.PARTITIONS_MAX) is a typo.
MIN_PARTITIONS_MAX = 100_000


@dataclass(frozen=True, slots=True)
class ReadOptions:
    logs: tuple[str, ...] = ()  # logs named by log, logs or the path (in the order given)
    log_pattern: str | None = None  # logPattern: read every log whose whole name matches
    starting: Bound = field(default_factory=lambda: Bound("earliest"))  # for every log not in starting_by_log
    ending: Bound = field(default_factory=lambda: Bound("latest"))
    starting_by_log: tuple[tuple[str, Bound], ...] = ()
    ending_by_log: tuple[tuple[str, Bound], ...] = ()
    min_partitions: int | None = None
    fail_on_data_loss: bool = True

    def starting_for(self, log: str) -> Bound:
        return dict(self.starting_by_log).get(log, self.starting)

    def ending_for(self, log: str) -> Bound:
        return dict(self.ending_by_log).get(log, self.ending)

    def includes(self, log: str) -> bool:
        """Whether the selection (names or pattern) takes this log."""
        if self.log_pattern is not None:
            return re.fullmatch(self.log_pattern, log) is not None
        return log in self.logs


def _checked_name(option: str, name: str) -> str:
    try:
        check_name("log", name)
    except InvalidMetadataError as exc:
        raise OptionError(option, str(exc)) from None
    return name


def _selection(opts: Mapping[str, str], log: str | None, ledger: bool) -> tuple[tuple[str, ...], str | None]:
    """The logs named (log / path / logs) and the pattern; exactly one way of saying it."""
    listed = text_option(opts, "logs")
    pattern = text_option(opts, "logPattern")
    given = [name for name, value in (("log", log), ("logs", listed), ("logPattern", pattern), ("ledger", ledger))
             if value]
    if len(given) != 1:
        what = f"got {' and '.join(given)}" if given else "got none"
        raise OptionError(given[0] if given else "log",
                          f"give exactly one of log (a log name), logs (comma-separated names), logPattern (a regular "
                          f"expression over log names) and ledger (one ledger); {what}")
    if listed is not None:
        names = [_checked_name("logs", n.strip()) for n in listed.split(",") if n.strip()]
        if not names:
            raise OptionError("logs", f"expected comma-separated log names, got {listed!r}")
        return tuple(dict.fromkeys(names)), None
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError("logPattern", f"not a regular expression: {exc} in {pattern!r}") from None
        return (), pattern
    return ((log,) if log is not None else ()), None


def _end(opts: Mapping[str, str], which: str, default: str) -> tuple[Bound, tuple[tuple[str, Bound], ...]]:
    """One end (which = "starting" or "ending"): the bound for every log and the per-log ones."""
    single, per_log, at_time = f"{which}Position", f"{which}Positions", f"{which}Timestamp"
    given = [name for name in (single, per_log, at_time) if text_option(opts, name) is not None]
    if at_time in given and len(given) > 1:
        raise OptionError(at_time, f"give one of {at_time} and {' / '.join(n for n in given if n != at_time)}")
    try:
        if at_time in given:
            return parse_timestamp(str(text_option(opts, at_time))), ()
        bound = parse_bound(str(text_option(opts, single))) if single in given else Bound(default)
    except BoundError as exc:
        raise OptionError(at_time if at_time in given else single, str(exc)) from None
    if per_log not in given:
        return bound, ()
    if bound.kind == "position":
        raise OptionError(single, f"a single position with {per_log} is ambiguous: put it in {per_log}, under its log")
    try:
        return bound, parse_log_bounds(str(text_option(opts, per_log)))
    except BoundError as exc:
        raise OptionError(per_log, str(exc)) from None


def _check_bounds_fit(read: ReadOptions, ledger: bool) -> None:
    """Per-log bounds name logs this read takes; one position needs one log; no times on a ledger."""
    for option, by_log in (("startingPositions", read.starting_by_log), ("endingPositions", read.ending_by_log)):
        if by_log and ledger:
            raise OptionError(option, "positions per log need logs (option log, logs or logPattern), not ledger")
        for name, _ in by_log:
            if not read.includes(name):
                hint = did_you_mean(name, read.logs) if read.logs else ""
                taken = f"logPattern {read.log_pattern!r}" if read.log_pattern else f"logs {', '.join(read.logs)}"
                raise OptionError(option, f"names log {name!r}, which this read does not take ({taken}){hint}")
    for option, bound in (("startingPosition", read.starting), ("endingPosition", read.ending)):
        if bound.kind == "position" and len(read.logs) != 1 and not ledger:
            raise OptionError(option, f"one position is for one log; with several logs give "
                              f"{option}s as {{\"<log>\": <position>, ...}}")
        if bound.kind == "timestamp" and ledger:
            raise OptionError(option.replace("Position", "Timestamp"),
                              "times select ledgers of a log (option log, logs or logPattern), not a single ledger")


def _min_partitions(opts: Mapping[str, str]) -> int | None:
    return int_option(opts, "minPartitions", None, 1, MIN_PARTITIONS_MAX)


def _fail_on_data_loss(opts: Mapping[str, str]) -> bool:
    raw = (text_option(opts, "failOnDataLoss") or "true").lower()
    if raw not in ("true", "false"):
        raise OptionError("failOnDataLoss", f"expected true or false, got {raw!r}")
    return raw == "true"


def parse_read_options(opts: Mapping[str, str], log: str | None, ledger: bool) -> ReadOptions:
    """The reading options from Spark's lower-cased option map, given the log named by log or
    the path (options._target) and whether a ledger was named; OptionError names the option."""
    logs, pattern = _selection(opts, log, ledger)
    starting, starting_by_log = _end(opts, "starting", "earliest")
    ending, ending_by_log = _end(opts, "ending", "latest")
    read = ReadOptions(logs, pattern, starting, ending, starting_by_log, ending_by_log,
                       _min_partitions(opts), _fail_on_data_loss(opts))
    _check_bounds_fit(read, ledger)
    return read


def check_stream_read(read: ReadOptions) -> None:
    """A stream reads logs (not one ledger) from their starts and has no end: Trigger.AvailableNow
    is how a stream stops (stream/read.py has the rest: starts, index, new logs)."""
    if not read.logs and read.log_pattern is None:
        raise OptionError("ledger", "a stream reads logs (option log, logs or logPattern); one ledger is for batch reads")
    ending = "endingTimestamp" if read.ending.kind == "timestamp" else "endingPosition"
    for name, given in ((ending, read.ending.kind != "latest"), ("endingPositions", bool(read.ending_by_log))):
        if given:
            raise OptionError(name, "is for batch reads: a stream has no end (Trigger.AvailableNow stops at what is "
                              "readable when the query starts)")
