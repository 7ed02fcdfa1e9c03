"""A stream's offsets: per log, the next entry to read. Pure: no I/O, no pyspark.

Spark keeps the offsets in the query's checkpoint as JSON. The JSON is the shape of the batch
reader's `startingPositions` (a Kafka-like object from log name to position), so the end of any
micro-batch can be given to a batch read as is:

    {"orders": {"seq": 3, "ledger": "<32 hex digits>", "entry": 120}, "refunds": {...}}

A position names the next entry to read: entry `entry` of the ledger with sequence number
`seq`. `ledger` is that ledger's qualified name, or "" while the log has no ledger at that seq
yet (the stream waits for the next ledger appended). Checkpoints written before issue 22 hold
one log's position at the top level ({"seq", "entry", "ledger"}); they are read as that log's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark_ledger.datasource.errors import LedgerSourceError


@dataclass(frozen=True, slots=True, order=True)
class LogOffset:
    """The next entry of one log to read: entry `entry` of the ledger with sequence number `seq`."""

    seq: int
    entry: int
    ledger: str = ""  # qualified name of that ledger when known (for people and checks)

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "ledger": self.ledger, "entry": self.entry}

    @classmethod
    def from_dict(cls, d: Any) -> LogOffset:
        try:
            offset = cls(int(d["seq"]), int(d["entry"]), str(d.get("ledger", "")))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise LedgerSourceError(f"not a ledger stream position: {d!r}") from exc
        if offset.seq < 0 or offset.entry < 0:
            raise LedgerSourceError(f"not a ledger stream position (negative seq or entry): {d!r}")
        return offset


StreamOffset = dict[str, LogOffset]  # log name -> next entry to read


def offset_to_json(offset: Mapping[str, LogOffset]) -> dict[str, Any]:
    """The checkpoint form, logs sorted so equal offsets print alike."""
    return {name: offset[name].to_dict() for name in sorted(offset)}


def _legacy(d: Mapping[str, Any]) -> bool:
    """A pre-issue-22 offset: one log's position at the top level (a log's value is an object)."""
    return isinstance(d.get("seq"), int) and isinstance(d.get("entry"), int)


def offset_from_json(d: Mapping[str, Any] | str, single_log: str | None) -> StreamOffset:
    """The offset Spark hands back; `single_log` names the log of a one-log stream, which an old
    checkpoint's top-level position belongs to."""
    if isinstance(d, str):
        try:
            d = json.loads(d)
        except ValueError as exc:
            raise LedgerSourceError(f"not a ledger stream offset: {d!r}") from exc
    if not isinstance(d, Mapping):
        raise LedgerSourceError(f"not a ledger stream offset: {d!r}")
    if _legacy(d):
        if single_log is None:
            raise LedgerSourceError(f"the checkpoint holds one log's offset {dict(d)!r} (written before issue 22), "
                                    "but this stream reads several logs: start it with a new checkpoint")
        return {single_log: LogOffset.from_dict(d)}
    return {str(name): LogOffset.from_dict(value) for name, value in d.items()}
