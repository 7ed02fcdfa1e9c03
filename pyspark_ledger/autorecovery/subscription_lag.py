"""How far behind every durable subscription is, for `ledger subscriptions list` and for
Prometheus: the elected autorecovery process serves one gauge per subscription on its
--metrics-port (only the elected one, so that a cluster of services reports each lag once).

The lag is measured when Prometheus scrapes, at most once per REFRESH_S (a scrape in between
gets the last measure): each subscription costs a walk of its log's ledgers from its position
(metadata only) and at most three entry reads (log/subscription.lag)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from metadata.errors import NoSuchLogError
from metadata.subscriptions import Subscription, SubscriptionStore
from pyspark_ledger.log.subscription import SubscriptionLag, lag

if TYPE_CHECKING:
    from pyspark_ledger.client import LedgerClient

log = logging.getLogger(__name__)

LOGS_MEASURED_MAX = 10_000  # one measure walks at most this many logs
REFRESH_S = 30.0

Measured = list[tuple[Subscription, SubscriptionLag]]


def measure(client: LedgerClient, log_name: str | None = None, password: bytes = b"") -> Measured:
    """Every subscription of `log_name` (None: of every log, bounded) with its lag now. A log
    deleted meanwhile is skipped."""
    subs = SubscriptionStore(client.store)
    names = [log_name] if log_name is not None else client.list_logs()[:LOGS_MEASURED_MAX]
    now_ms = int(time.time() * 1000)
    out: Measured = []
    for name in names:
        listed = subs.list(name)
        if not listed:
            continue
        try:
            with client.open_log_reader(name, password=password) as reader:
                out.extend((sub, lag(reader, sub, now_ms)) for sub in listed)
        except NoSuchLogError:
            if log_name is not None:
                raise
    return out


class SubscriptionLagCollector(Collector):
    """Gauges per (log, subscription), while `leading()` says this process is the elected one."""

    def __init__(self, measure_all: Callable[[], Measured], leading: Callable[[], bool], refresh_s: float = REFRESH_S,
                 clock: Callable[[], float] = time.monotonic):
        self._measure_all = measure_all
        self._leading = leading
        self._refresh_s = refresh_s
        self._clock = clock
        self._lock = threading.Lock()  # one measure at a time, however many scrapes
        self._last: Measured = []
        self._measured_at: float | None = None

    def collect(self) -> Iterator[Metric]:
        if not self._leading():
            return
        with self._lock:
            if self._measured_at is None or self._clock() - self._measured_at >= self._refresh_s:
                try:
                    self._last = self._measure_all()
                except Exception:  # a scrape must answer: keep the last measure, say why in the log
                    log.exception("subscription lag not measured; serving the last measure")
                self._measured_at = self._clock()
            measured = list(self._last)
        labels = ["log", "subscription"]
        families = (
            ("ledger_subscription_lag_entries", "entries after the subscription's position", lambda s, b: b.entries),
            ("ledger_subscription_lag_bytes", "bytes of those entries", lambda s, b: b.size_bytes),
            ("ledger_subscription_lag_seconds", "age of the oldest unread message (0 when caught up)",
             lambda s, b: b.time_ms / 1000),
            ("ledger_subscription_lost_entries", "entries retention trimmed before the subscription read them",
             lambda s, b: s.lost_entries),
            ("ledger_subscription_last_commit_timestamp_seconds", "when the subscription's position last moved",
             lambda s, b: s.commit_ms / 1000),
        )
        for name, doc, value in families:
            family = GaugeMetricFamily(name, doc, labels=labels)
            for sub, behind in measured:
                family.add_metric([sub.log, sub.name], float(value(sub, behind)))
            yield family
