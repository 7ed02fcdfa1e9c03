"""A place in a log: (ledger sequence number, entry id, index in the entry), totally ordered.

`index` is a message's place in a batched entry (protocol.message_batch), 0 for an unbatched
entry. JSON positions carry it as "index"; a position written before batches (no "index")
reads as index 0."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from metadata import LedgerId


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """A place in a log. Ordered by (seq, entry_id, index); `ledger_id` is carried for convenience."""

    seq: int
    entry_id: int
    ledger_id: LedgerId = field(compare=False)
    index: int = 0

    def __post_init__(self) -> None:
        if self.index < 0:
            raise ValueError(f"a position's index is >= 0, not {self.index}")

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "ledger": self.ledger_id.qualified_name, "entry": self.entry_id, "index": self.index}

    @classmethod
    def from_json(cls, d: dict[str, Any] | str) -> Position:
        if isinstance(d, str):
            d = json.loads(d)
        try:
            return cls(int(d["seq"]), int(d["entry"]), LedgerId.from_qualified_name(d["ledger"]),  # type: ignore[index]  # bad JSON: TypeError below
                       int(d.get("index", 0)))  # type: ignore[union-attr]  # bad JSON: AttributeError below
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not a log position: {d!r} (expected {{\"seq\": n, \"ledger\": hex, \"entry\": n, "
                             f"\"index\": n}}; index optional)") from exc

    def __str__(self) -> str:
        return f"{self.seq}:{self.ledger_id}:{self.entry_id}" + (f":{self.index}" if self.index else "")


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One message of a log: an unbatched entry, or one message of a batch (with its key, append
    time, event time and headers when the batch carries them).

    `timestamp_ms` is the message's time as Spark's `timestamp` column shows it: its own append
    time (a batch's, or an Arrow entry's), or for an entry with no time of its own (format 2
    raw, or Arrow written before entries had times) the time its ledger joined the log."""

    position: Position
    payload: bytes
    key: bytes | None = None
    append_time_ms: int | None = None  # None: no time of its own (an unbatched raw entry, an Arrow entry before times)
    event_time_ms: int | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    ledger_time_ms: int | None = None  # the ledger's join time (LogLedger.ctime_ms), when read from a log

    @property
    def timestamp_ms(self) -> int | None:
        return self.append_time_ms if self.append_time_ms is not None else self.ledger_time_ms
