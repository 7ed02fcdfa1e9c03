"""What is offloaded, per log: for `ledger offload status`, `ledger logs show` and the metrics.

    offloaded_ledgers / offloaded_bytes   ledgers whose record is OFFLOADED, and their files' bytes
    due_ledgers                          sealed ledgers the log's settings say should be offloaded
                                          but are not (yet)
    lag_ms                               how long the oldest of those has been due (0: none)
"""

from __future__ import annotations

from dataclasses import dataclass

from metadata.errors import MetadataError
from metadata.log_record import LogRecord
from metadata.offload_record import offload_record
from metadata.offload_settings import OffloadSettings
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.offload.choice import LedgerView, choose


@dataclass(frozen=True)
class LogOffloadStatus:
    log: str
    ledgers: int
    offloaded_ledgers: int
    offloaded_bytes: int
    due_ledgers: int
    lag_ms: int
    settings: OffloadSettings

    def to_json(self) -> dict[str, object]:
        return {"log": self.log, "ledgers": self.ledgers, "offloadedLedgers": self.offloaded_ledgers,
                "offloadedBytes": self.offloaded_bytes, "dueLedgers": self.due_ledgers, "lagMs": self.lag_ms,
                "offloadAfterMs": self.settings.after_ms, "offloadAfterBytes": self.settings.after_bytes,
                "offloadDeleteAfterMs": self.settings.delete_after_ms}


def log_offload_status(client: LedgerClient, rec: LogRecord, now_ms: int) -> LogOffloadStatus:
    offloaded: dict[int, int] = {}
    for lg in rec.ledgers:
        if not lg.sealed:
            continue
        try:
            r = offload_record(client.ledgers.read(lg.ledger_id)[0])
        except MetadataError:
            continue  # trimmed meanwhile, or unreadable: not counted
        if r is not None and r.offloaded:
            offloaded[lg.seq] = r.size_bytes
    settings = OffloadSettings.of(rec)
    views = [LedgerView(lg.seq, lg.sealed, lg.sealed_ms if lg.sealed_ms is not None else lg.ctime_ms,
                        lg.size_bytes or 0, lg.seq in offloaded) for lg in rec.ledgers]
    due = choose(views, settings, now_ms, limit=len(views) + 1) if settings.enabled else []
    since = {v.seq: v.sealed_ms for v in views}
    lag = max((now_ms - since[s] - (settings.after_ms or 0) for s in due), default=0)
    return LogOffloadStatus(rec.name, len(rec.ledgers), len(offloaded), sum(offloaded.values()), len(due),
                            max(lag, 0), settings)
