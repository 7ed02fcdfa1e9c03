"""The always-on autorecovery service: an auditor candidate and replication workers in one
process (`ledger autorecovery`, or `bookie --autorecovery`, which runs that command as its child).

Any number of these run in a cluster: one of them is elected auditor (elected_auditor), every one
of them runs workers (replication_worker). stop() returns within STOP_TIMEOUT_S: every thread
waits on the same stop event, and a copy still running then is abandoned (its threads are
daemons; its claim goes with the process's session, and a copy without its metadata change is
only garbage on the replacement bookie, see rereplication).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from pyspark_ledger.autorecovery.copy_pace import CopyPace, check_rate_mb_s
from pyspark_ledger.autorecovery.elected_auditor import ElectedAuditor
from pyspark_ledger.autorecovery.metrics import AutorecoveryMetrics
from pyspark_ledger.autorecovery.replication_worker import ReplicationWorker
from pyspark_ledger.autorecovery.retention_task import RetentionSettings, RetentionTask
from pyspark_ledger.ledger.context import LedgerContext
from pyspark_ledger.log.retention_pass import SubscriptionSource
from pyspark_ledger.log.service import LedgerService

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 4.0
WORKERS_MAX = 64


@dataclass(frozen=True, slots=True)
class AutorecoverySettings:
    lost_bookie_grace_s: float = 30.0  # down this long before a bookie is lost (a restart is not a loss)
    scan_rate_per_s: float = 500.0  # ledgers the audit scan reads per second at most
    workers: int = 4  # replication workers in this process: the ledgers copied at once
    rereplication_rate_mb_s: float = 50.0  # copy bytes per second, all workers together (copy_pace)
    open_ledger_grace_s: float = 30.0  # an OPEN ledger's mark waits this long before it is fenced and closed
    poll_interval_s: float = 1.0  # an idle worker looks for marks this often
    auditor: bool = True  # stand for election as the auditor
    password: bytes = b""  # empty: work as the operator (replication_worker); else this password for every ledger
    # Misplaced ledgers (placement_scan) are looked for this often, and whenever a rack comes back.
    placement_scan_interval_s: float = 3600.0
    retention: RetentionSettings = RetentionSettings()  # the leader's retention passes (with a log service)

    def validate(self) -> None:
        if self.lost_bookie_grace_s < 0 or self.open_ledger_grace_s < 0:
            raise ValueError("--lost-bookie-grace-s and --open-ledger-grace-s must be >= 0")
        if not 0 < self.scan_rate_per_s <= 100_000:
            raise ValueError("--scan-rate must be in (0, 100000] ledgers per second")
        check_rate_mb_s(self.rereplication_rate_mb_s, "--rereplication-rate-mb-s")
        if not 0 <= self.workers <= WORKERS_MAX:
            raise ValueError(f"--workers must be in 0..{WORKERS_MAX}")
        if not 0.05 <= self.poll_interval_s <= 60:
            raise ValueError("--poll-interval-s must be in 0.05..60")
        if self.placement_scan_interval_s <= 0:
            raise ValueError("--placement-scan-interval-s must be > 0")
        self.retention.validate()


def holder_name() -> str:
    """Who holds a lock: host, process and a random suffix (two services in one process differ)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class AutorecoveryService:
    def __init__(self, context: LedgerContext, settings: AutorecoverySettings | None = None,
                 metrics: AutorecoveryMetrics | None = None, *, logs: LedgerService | None = None,
                 subscriptions: SubscriptionSource | None = None):
        """`logs`: the log service retention trims through (the CLI passes its client); without
        it the leader applies no retention."""
        self.settings = settings or AutorecoverySettings()
        self.settings.validate()
        self.context = context
        self.metrics = metrics or AutorecoveryMetrics()
        self.holder = holder_name()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        s = self.settings
        self.retention = None if logs is None else RetentionTask(logs, subscriptions, s.retention, self.metrics)
        self.auditor = ElectedAuditor(context.ledgers.store, self.holder, lost_bookie_grace_s=s.lost_bookie_grace_s,
                                      scan_rate_per_s=s.scan_rate_per_s, metrics=self.metrics, stop=self._stop,
                                      placement_scan_interval_s=s.placement_scan_interval_s, retention=self.retention)
        self.pace = CopyPace(s.rereplication_rate_mb_s, stop=self._stop)  # one bucket for every worker
        self.workers = [ReplicationWorker(context, f"{self.holder}/w{i}", open_ledger_grace_s=s.open_ledger_grace_s,
                                          poll_interval_s=s.poll_interval_s, password=s.password,
                                          metrics=self.metrics, stop=self._stop, pace=self.pace)
                        for i in range(s.workers)]

    def start(self) -> AutorecoveryService:
        if self.settings.auditor:
            self._spawn("autorecovery-auditor", self.auditor.run)
        for i, w in enumerate(self.workers):
            self._spawn(f"autorecovery-worker-{i}", w.run)
        log.info("autorecovery started holder=%s workers=%d auditor=%s grace_s=%g rereplication_rate_mb_s=%g",
                 self.holder, len(self.workers), self.settings.auditor, self.settings.lost_bookie_grace_s,
                 self.settings.rereplication_rate_mb_s)
        return self

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        def body() -> None:
            try:
                target()
            except Exception:
                log.exception("autorecovery thread died thread=%s", name)

        t = threading.Thread(target=body, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    @property
    def leading(self) -> bool:
        return self.auditor.leading

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in self._threads if t.is_alive()]
        if alive:
            log.warning("autorecovery threads still busy at stop, abandoned threads=%s", ",".join(alive))
        self.metrics.close()
