"""A place in a log: (ledger sequence number, entry id), totally ordered along the log."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from metadata import LedgerId


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """A place in a log. Ordered by (seq, entry_id); `ledger_id` is carried for convenience."""

    seq: int
    entry_id: int
    ledger_id: LedgerId = field(compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "ledger": self.ledger_id.qualified_name, "entry": self.entry_id}

    @classmethod
    def from_json(cls, d: dict[str, Any] | str) -> Position:
        if isinstance(d, str):
            d = json.loads(d)
        try:
            return cls(int(d["seq"]), int(d["entry"]), LedgerId.from_qualified_name(d["ledger"]))  # type: ignore[index]  # bad JSON: TypeError below
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a log position: {d!r} (expected {{\"seq\": n, \"ledger\": hex, \"entry\": n}})") from exc

    def __str__(self) -> str:
        return f"{self.seq}:{self.ledger_id}:{self.entry_id}"


@dataclass(frozen=True)
class LogEntry:
    position: Position
    payload: bytes
