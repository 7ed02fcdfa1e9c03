"""Where a read starts and ends, as the options say it: parsed and checked, no I/O.

A bound is `earliest`, `latest`, a position or a time. A position is the JSON a row's columns
give back: {"seq", "ledger", "entry"} and, for Arrow entries (many rows each), "index", the row
within the entry (0 when absent). Starting bounds are inclusive, ending bounds exclusive (as
Kafka's offsets): the position just after a row is the row's own position with index + 1, for
raw entries (one row each) as for Arrow ones. Times are milliseconds since the epoch and select
by the rows' `timestamp` column (read/planning.py says what that time is).

Per-log bounds (startingPositions / endingPositions) are a JSON object from log name to a
position, "earliest" or "latest", like Kafka's startingOffsets JSON per topic.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from metadata import InvalidMetadataError
from pyspark_ledger.errors import PySparkLedgerError
from pyspark_ledger.log import Position

POSITION_EXAMPLE = '{"seq": 0, "ledger": "<32 hex digits>", "entry": 0}'
TIMESTAMP_MAX_MS = 2**53  # a year about 285,000: more is a unit mistake (micro- or nanoseconds)


class BoundError(PySparkLedgerError, ValueError):
    """A bound that does not parse; the caller names the option (options.OptionError)."""


@dataclass(frozen=True, slots=True)
class Bound:
    """One end of a read, for one log."""

    kind: str  # "earliest" | "latest" | "position" | "timestamp"
    position: Position | None = None
    index: int = 0  # row within the position's entry (Arrow); 0 for raw entries
    timestamp_ms: int | None = None

    def __str__(self) -> str:
        if self.kind == "position" and self.position is not None:
            p = self.position
            return f"seq {p.seq} entry {p.entry_id}" + (f" index {self.index}" if self.index else "")
        if self.kind == "timestamp":
            return f"timestamp {self.timestamp_ms}"
        return self.kind


def position_bound(value: Any) -> Bound:
    """A position from its JSON value (a dict, or its text); BoundError says what is wrong."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise BoundError(f"not valid JSON ({exc}); expected earliest, latest or a position like "
                             f"{POSITION_EXAMPLE}") from None
    if not isinstance(value, dict):
        raise BoundError(f"expected a position like {POSITION_EXAMPLE}, got {value!r}")
    unknown = sorted(set(value) - {"seq", "ledger", "entry", "index"})
    if unknown:
        raise BoundError(f"unknown keys {unknown} in position {json.dumps(value)}; expected {POSITION_EXAMPLE}")
    try:
        index = int(value.get("index", 0))
        if index < 0:
            raise BoundError(f"seq, entry and index must be >= 0 in {json.dumps(value)}")
        # The bound keeps the index beside the entry's position (the row or message within it).
        position = Position.from_json({k: v for k, v in value.items() if k != "index"})
    except (ValueError, TypeError, AttributeError, InvalidMetadataError) as exc:
        raise BoundError(f"{exc}") from None
    if position.seq < 0 or position.entry_id < 0:
        raise BoundError(f"seq, entry and index must be >= 0 in {json.dumps(value)}")
    return Bound("position", position, index)


def parse_bound(text: str) -> Bound:
    """startingPosition / endingPosition: earliest, latest or a JSON position."""
    word = text.strip().lower()
    if word in ("earliest", "latest"):
        return Bound(word)
    return position_bound(text)


def parse_timestamp(text: str) -> Bound:
    """startingTimestamp / endingTimestamp: milliseconds since the epoch."""
    try:
        ms = int(text.strip())
    except ValueError:
        raise BoundError(f"expected milliseconds since the epoch (an integer), got {text!r}") from None
    if not 0 <= ms <= TIMESTAMP_MAX_MS:
        raise BoundError(f"expected milliseconds since the epoch between 0 and {TIMESTAMP_MAX_MS}, got {ms}")
    return Bound("timestamp", timestamp_ms=ms)


def parse_log_bounds(text: str) -> tuple[tuple[str, Bound], ...]:
    """startingPositions / endingPositions: {"<log>": position | "earliest" | "latest", ...}."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise BoundError(f"not valid JSON ({exc}); expected {{\"<log>\": {POSITION_EXAMPLE}, ...}}") from None
    if not isinstance(value, dict) or not value:
        raise BoundError(f"expected a JSON object from log name to position, like {{\"<log>\": {POSITION_EXAMPLE}}}, "
                         f"got {text.strip()!r}")
    out = []
    for name, item in value.items():
        if isinstance(item, str) and item.strip().lower() in ("earliest", "latest"):
            out.append((name, Bound(item.strip().lower())))
            continue
        try:
            out.append((name, position_bound(item)))
        except BoundError as exc:
            raise BoundError(f"log {name!r}: {exc}") from None
    return tuple(out)
