"""Retention on a schedule: a task of the elected auditor (one per cluster), and `ledger retention run`.

Every `interval_s` the leader runs one pass: it visits logs in name order from where the last
pass stopped (a cursor kept in memory: a new leader starts from the first log), at most
`logs_per_pass` of them and until `ledgers_per_pass` ledgers were read, and applies each log's
retention (pyspark_ledger.log.retention_pass). Every log is visited within
ceil(logs / logs_per_pass) passes. A log that fails is logged and skipped until the next visit;
trims are crash-safe (a crash leaves deletions queued, and the next pass finishes them).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from metadata import MetadataError
from metadata.logs import NoSuchLogError
from pyspark_ledger.autorecovery.metrics import AutorecoveryMetrics
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.log.retention_pass import PassOutcome, SubscriptionSource, apply_retention
from pyspark_ledger.log.service import LedgerService

log = logging.getLogger(__name__)

LOGS_PER_PASS_MAX = 100_000
DELETES_PER_LOG_MAX = 4_096  # ledgers one log's pass deletes; the rest stay queued for the next pass


@dataclass(frozen=True, slots=True)
class RetentionSettings:
    interval_s: float = 60.0  # a pass this often while leading
    logs_per_pass: int = 1_000
    ledgers_per_pass: int = 500_000  # ledgers read (heads and segments) by one pass, all logs together
    deletes_per_log: int = 1_024

    def validate(self) -> None:
        if not 0.05 <= self.interval_s <= 86_400:
            raise ValueError("--retention-interval-s must be in 0.05..86400")
        if not 1 <= self.logs_per_pass <= LOGS_PER_PASS_MAX:
            raise ValueError(f"--retention-logs-per-pass must be in 1..{LOGS_PER_PASS_MAX}")
        if self.ledgers_per_pass < 1 or not 1 <= self.deletes_per_log <= DELETES_PER_LOG_MAX:
            raise ValueError(f"retention: ledgers per pass must be >= 1, deletes per log in 1..{DELETES_PER_LOG_MAX}")


@dataclass
class RetentionTask:
    client: LedgerService
    subscriptions: SubscriptionSource | None
    settings: RetentionSettings = field(default_factory=RetentionSettings)
    metrics: AutorecoveryMetrics | None = None
    _after: str = ""  # the last log visited: the next pass starts after it
    _ran_at: float = field(default=float("-inf"))

    def due(self) -> bool:
        return time.monotonic() - self._ran_at >= self.settings.interval_s

    def run_pass(self, keep_going: Callable[[], bool] = lambda: True, only: str | None = None) -> list[PassOutcome]:
        """One pass: the logs after the cursor (wrapping around), bounded; `only`: that log alone."""
        self._ran_at = time.monotonic()
        s = self.settings
        if only is not None:
            names = [only]
        else:
            every = sorted(self.client.logs.names())
            names = [n for n in every if n > self._after] + [n for n in every if n <= self._after]
            names = names[:s.logs_per_pass]
        out: list[PassOutcome] = []
        read = 0
        for name in names:
            if not keep_going() or read >= s.ledgers_per_pass:
                break
            self._after = name
            outcome = self._one(name)
            if outcome is not None:
                out.append(outcome)
                read += outcome.read_ledgers + 1
        if self.metrics is not None:
            self.metrics.retention_passes.inc()
        return out

    def _one(self, name: str) -> PassOutcome | None:
        try:
            outcome = apply_retention(self.client, name, self.subscriptions, delete_max=self.settings.deletes_per_log)
        except NoSuchLogError:
            return None  # deleted since the listing
        except (MetadataError, LedgerError) as exc:
            log.warning("retention pass failed for a log; it is tried again next pass log=%s error=%s", name, exc)
            if self.metrics is not None:
                self.metrics.retention_failures.inc()
            return None
        if self.metrics is not None:
            m = self.metrics
            m.retention_trimmed_ledgers.inc(len(outcome.trimmed))
            m.retention_trimmed_bytes.inc(outcome.trimmed_bytes)
            m.retention_lost_subscriptions.inc(len(outcome.lost))
        return outcome
