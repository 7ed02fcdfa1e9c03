"""When a LogWriter starts a new ledger: by entries, bytes or age, whichever comes first.

By default a writer rolls over by the log's settings rollover_max_bytes and rollover_max_age_ms
(metadata.log_settings; 0 turns one off), so that retention, which trims whole sealed ledgers,
can act on a log with one long-lived writer. Arguments given to open_log_writer win over them.
"""

from __future__ import annotations

from dataclasses import dataclass

from metadata import log_settings
from metadata.log_record import LogRecord


@dataclass(frozen=True, slots=True)
class RolloverPolicy:
    max_entries: int | None = None  # None: never by this measure
    max_bytes: int | None = None
    max_age_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("max_entries", "max_bytes", "max_age_s"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"rollover {name} must be > 0 (None: never), got {value}")

    @classmethod
    def for_log(cls, rec: LogRecord, *, max_entries: int | None, max_bytes: int | None,
                max_age_s: float | None) -> RolloverPolicy:
        """The arguments where given, else the log's settings; 0, in either, is never."""
        size_setting = log_settings.get(rec, "rollover_max_bytes")
        age_setting = log_settings.get(rec, "rollover_max_age_ms")
        size = max_bytes if max_bytes is not None else size_setting if isinstance(size_setting, int) else None
        age = max_age_s if max_age_s is not None else age_setting / 1000 if isinstance(age_setting, int) else None
        return cls(max_entries or None, size or None, age or None)

    def due(self, entries: int, size_bytes: int, age_s: float, next_size: int) -> bool:
        """Whether the next entry (`next_size` bytes) goes to a new ledger. Never for an empty ledger."""
        if entries == 0:
            return False
        return bool((self.max_entries is not None and entries >= self.max_entries)
                    or (self.max_bytes is not None and size_bytes + next_size > self.max_bytes)
                    or (self.max_age_s is not None and age_s >= self.max_age_s))
