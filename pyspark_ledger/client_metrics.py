"""The ledger client's own Prometheus metrics (prometheus_client), for the application to expose.

Nothing is registered anywhere by default (no global side effects: an application may run
several clients, tests run many). To expose a client's metrics, register them in the
application's registry, once per client:

    registry = CollectorRegistry()
    client = LedgerClient(uri, metrics_registry=registry)   # or: client.metrics.register(registry)

Two clients in one registry would collide (same names): give each its own registry, or register
one of them. Off the per-entry path: an acknowledged run of adds (every add completed by one
bookie answer, in entry order) is one update and one latency sample, that of the run's oldest
add; at low load a run is one add, so the histogram is exact there and a sample of the slowest
add per answer under load. Reads are counted per chunk read from the bookies.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from operator import attrgetter
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

LATENCY_BUCKETS_S = (0.00025, 0.0005, 0.001, 0.002, 0.0035, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class CompletedAdd(Protocol):
    """What a completed add (an entry or a run of them) tells the metrics: its entries, their
    payload size and when it was submitted (time.monotonic())."""

    @property
    def count(self) -> int: ...

    @property
    def size(self) -> int: ...

    @property
    def started(self) -> float: ...


_size_of = attrgetter("size")
_count_of = attrgetter("count")


class ClientMetrics(Collector):
    """One client's counters and histograms, a collector the application may register."""

    def __init__(self) -> None:
        # registry=None: created unregistered; `register` puts them all in a registry at once.
        # prometheus_client appends _total to counters on the page: ledger_client_adds_total etc.
        self.adds = Counter("ledger_client_adds", "entries acknowledged by an ack quorum", registry=None)
        self.add_bytes = Counter("ledger_client_add_bytes", "payload bytes of the acknowledged entries", registry=None)
        self.add_failures = Counter("ledger_client_add_failures", "adds failed (fenced, closed, no bookies, timeout)",
                                    registry=None)
        self.add_latency = Histogram(
            "ledger_client_add_latency_seconds",
            "submit to acknowledgement, one sample per acknowledged run of adds (its oldest add)",
            buckets=LATENCY_BUCKETS_S, registry=None)
        self.ensemble_changes = Counter("ledger_client_ensemble_changes", "new fragments written after a bookie failed",
                                        registry=None)
        self.recoveries = Counter("ledger_client_recoveries", "open ledgers this client recovered (fenced and closed)",
                                  registry=None)
        self.read_entries = Counter("ledger_client_read_entries", "entries read from bookies", registry=None)
        self.read_latency = Histogram("ledger_client_read_latency_seconds", "one chunk of entries read from the bookies",
                                      buckets=LATENCY_BUCKETS_S, registry=None)
        self._all = (self.adds, self.add_bytes, self.add_failures, self.add_latency, self.ensemble_changes,
                     self.recoveries, self.read_entries, self.read_latency)

    def register(self, registry: CollectorRegistry) -> None:
        """Expose this client's metrics in `registry` (ValueError if the names are taken there)."""
        registry.register(self)

    def unregister(self, registry: CollectorRegistry) -> None:
        registry.unregister(self)

    def describe(self) -> Iterator[Metric]:
        """The names, without values: lets the registry refuse a second client's duplicates."""
        for metric in self._all:
            yield from metric.describe()

    def collect(self) -> Iterator[Metric]:
        for metric in self._all:
            yield from metric.collect()

    # ---- the hooks the handles call ------------------------------------------------------------

    def adds_completed(self, run: Sequence[CompletedAdd]) -> None:
        """Acknowledged adds, each an entry or a run (entry order, oldest first)."""
        if not run:
            return
        self.adds.inc(sum(map(_count_of, run)))
        self.add_bytes.inc(sum(map(_size_of, run)))
        self.add_latency.observe(time.monotonic() - run[0].started)

    def adds_failed(self, count: int) -> None:
        if count:
            self.add_failures.inc(count)

    def chunk_read(self, entries: int, started: float) -> None:
        """One chunk of `entries` entries read; `started` from time.monotonic()."""
        self.read_entries.inc(entries)
        self.read_latency.observe(time.monotonic() - started)
