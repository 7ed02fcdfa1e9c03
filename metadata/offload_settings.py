"""A log's offload settings as one typed value (stored as log settings, metadata/log_settings.py)."""

from __future__ import annotations

from dataclasses import dataclass

from metadata import log_settings
from metadata.log_record import LogRecord


@dataclass(frozen=True, slots=True)
class OffloadSettings:
    after_ms: int | None = None  # offload a ledger sealed at least this long ago
    after_bytes: int | None = None  # offload the sealed ledgers beyond the newest this many bytes
    delete_after_ms: int | None = None  # bookies drop their copies this long after the offload

    @property
    def enabled(self) -> bool:
        return self.after_ms is not None or self.after_bytes is not None

    @classmethod
    def of(cls, rec: LogRecord) -> OffloadSettings:
        def value(name: str) -> int | None:
            v = log_settings.get(rec, name)
            return v if isinstance(v, int) else None

        return cls(value("offload_after_ms"), value("offload_after_bytes"), value("offload_delete_after_ms"))
