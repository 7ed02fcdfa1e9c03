"""Offload on a schedule: a task of the elected auditor (one per cluster) and `ledger offload run`.

Every `interval_s` the leader runs one offload pass (pyspark_ledger/offload/offloader.py) when
the cluster setting offload_store names a store, then refreshes the per-log metrics (offload lag
and bytes offloaded). A pass that fails is logged and retried at the next interval; an offload
is crash-safe at every step (docs/tiered-storage.md), so a leader change mid-pass costs at most
one abandoned attempt, deleted by a later pass."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from metadata import LedgerId, MetadataError
from pyspark_ledger.autorecovery.metrics import AutorecoveryMetrics
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.offload.offload_ledger import ATTEMPT_STALE_MS
from pyspark_ledger.offload.offloader import PassResult, offload_pass
from pyspark_ledger.offload.status import log_offload_status

log = logging.getLogger(__name__)

STATUS_LOGS_MAX = 10_000  # logs whose offload metrics one pass refreshes


@dataclass(frozen=True, slots=True)
class OffloadTaskSettings:
    interval_s: float = 60.0  # a pass this often while leading
    stale_ms: int = ATTEMPT_STALE_MS  # an attempt still WRITING after this long is abandoned

    def validate(self) -> None:
        if not 0.05 <= self.interval_s <= 86_400:
            raise ValueError("--offload-interval-s must be in 0.05..86400")
        if self.stale_ms < 1_000:
            raise ValueError("offload stale bound must be >= 1000 ms")


@dataclass
class OffloadTask:
    client: LedgerClient
    settings: OffloadTaskSettings = field(default_factory=OffloadTaskSettings)
    metrics: AutorecoveryMetrics | None = None
    password: bytes = b""  # for `mac` ledgers: the autorecovery service's password, if it has one
    _last: float = field(default=float("-inf"))
    _known: set[LedgerId] = field(default_factory=set)  # seen OFFLOADED: not read again by later passes

    def due(self) -> bool:
        return time.monotonic() - self._last >= self.settings.interval_s

    def run_pass(self, keep_going: Callable[[], bool]) -> PassResult | None:
        self._last = time.monotonic()
        if not self.client.cluster_settings.value("offload_store"):
            return None  # no store: nothing to do
        try:
            result = offload_pass(self.client, password=lambda _log: self.password, stale_ms=self.settings.stale_ms,
                                  keep_going=keep_going, known=self._known)
        except (LedgerError, MetadataError) as exc:
            log.warning("offload pass failed, retried at the next interval error=%s", exc)
            return None
        if self.metrics is not None:
            self.metrics.offload_passes.inc()
            self.metrics.offloaded_ledgers.inc(len(result.offloaded))
            self._refresh_log_metrics(keep_going)
        return result

    def _refresh_log_metrics(self, keep_going: Callable[[], bool]) -> None:
        metrics = self.metrics
        if metrics is None:
            return
        now = int(time.time() * 1000)
        for name in self.client.list_logs()[:STATUS_LOGS_MAX]:
            if not keep_going():
                return
            try:
                st = log_offload_status(self.client, self.client.describe_log(name), now)
            except (LedgerError, MetadataError):
                continue  # deleted meanwhile
            metrics.offload_lag_ms.labels(log=name).set(st.lag_ms)
            metrics.offloaded_bytes.labels(log=name).set(st.offloaded_bytes)
