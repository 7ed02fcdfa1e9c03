"""The bookie's Prometheus metrics, on prometheus_client: one CollectorRegistry per bookie (tests
run several bookies in one process, so nothing goes to the library's global registry), served by
the library's own HTTP exposition, off unless --metrics-port is given.

Two kinds of metric live here:
- instruments the request paths update (counters, latency histograms), observed once per add
  batch or read request, never per entry;
- values the bookie keeps elsewhere (storage stats, GC figures, the scrubber, disk usage), read
  when scraped by a custom collector (`family`, `gauge`, `storage_histogram`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

log = logging.getLogger(__name__)

# A metric read when scraped: its samples as (labels, value); none = left out of the page.
Samples = Sequence[tuple[dict[str, str], float]]

LATENCY_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

# The storage engine keeps its latencies in log2 buckets of microseconds (bookie/storage/stats.py:
# bucket i holds [2**(i-1), 2**i) us). Exported with upper bounds 2**4 us (16 us) .. 2**23 us
# (8.4 s): below and above that nothing a disk does is told apart, and fewer series are cheaper.
STORAGE_BUCKET_EXPONENTS = range(4, 24)


class SampledFamilies(Collector):
    """Metrics whose values live elsewhere, read at scrape time. A family whose read fails or
    gives no samples is left out of the page (a failing metric must not break the endpoint)."""

    def __init__(self) -> None:
        self._families: dict[str, tuple[str, str, Callable[[], Samples]]] = {}
        self._histograms: dict[str, tuple[str, Callable[[], Mapping[str, Any] | None]]] = {}

    def add(self, name: str, kind: str, help_text: str, fn: Callable[[], Samples]) -> None:
        if kind not in ("gauge", "counter") or (kind == "counter" and not name.endswith("_total")):
            raise ValueError(f"metric {name}: a gauge, or a counter whose name ends in _total")
        self._families[name] = (help_text, kind, fn)

    def add_storage_histogram(self, name: str, help_text: str, fn: Callable[[], Mapping[str, Any] | None]) -> None:
        """`fn` returns a storage LatencyHistogram's to_dict() (or None: left out)."""
        self._histograms[name] = (help_text, fn)

    def collect(self) -> Iterator[Metric]:
        for name, (help_text, kind, fn) in sorted(self._families.items()):
            try:
                samples = list(fn())
            except Exception:  # logged, not raised: one failing metric must not break the endpoint
                log.debug("metric not sampled name=%s", name, exc_info=True)
                continue
            if samples:
                yield _family(name, kind, help_text, samples)
        for name, (help_text, hist_fn) in sorted(self._histograms.items()):
            try:
                hist = hist_fn()
            except Exception:  # as above
                log.debug("metric not sampled name=%s", name, exc_info=True)
                continue
            if hist is not None:
                yield storage_histogram_family(name, help_text, hist)


def _family(name: str, kind: str, help_text: str, samples: Samples) -> Metric:
    label_names = sorted(samples[0][0])
    family: CounterMetricFamily | GaugeMetricFamily = (
        CounterMetricFamily(name, help_text, labels=label_names) if kind == "counter"
        else GaugeMetricFamily(name, help_text, labels=label_names))
    for labels, value in samples:
        family.add_metric([labels.get(k, "") for k in label_names], float(value))
    return family


def storage_histogram_family(name: str, help_text: str, hist: Mapping[str, Any]) -> HistogramMetricFamily:
    """A storage LatencyHistogram (its to_dict(): count, mean_us, buckets_le_us {2**i: n}) as a
    Prometheus histogram in seconds. The count is the buckets' sum, so _count always equals the
    +Inf bucket even if the journal thread recorded a sample while the dict was built."""
    per_bound: Mapping[int, int] = hist.get("buckets_le_us") or {}
    count = sum(per_bound.values())
    buckets: list[tuple[str, float]] = []
    for exp in STORAGE_BUCKET_EXPONENTS:
        bound_us = 2**exp
        buckets.append((floatToGoString(bound_us / 1e6), float(sum(n for le, n in per_bound.items() if le <= bound_us))))
    buckets.append(("+Inf", float(count)))
    total_s = float(hist.get("mean_us", 0.0)) * float(hist.get("count", 0)) / 1e6
    return HistogramMetricFamily(name, help_text, buckets=buckets, sum_value=total_s)


class Metrics:
    """One bookie's metrics and its registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        # prometheus_client adds the _total suffix: these are bookie_adds_total etc. on the page.
        self.adds = Counter("bookie_adds", "entries durably added", registry=r)
        self.add_bytes = Counter("bookie_add_bytes", "entry bytes durably added", registry=r)
        self.add_errors = Counter("bookie_add_errors", "add batches refused or failed", registry=r)
        self.read_entries = Counter("bookie_read_entries", "entries served by reads", registry=r)
        self.add_latency = Histogram("bookie_add_latency_seconds",
                                     "time from receiving an add batch to its durable ack (one sample per batch)",
                                     buckets=LATENCY_BUCKETS_S, registry=r)
        self.read_latency = Histogram("bookie_read_latency_seconds", "time to serve a read request",
                                      buckets=LATENCY_BUCKETS_S, registry=r)
        self.sampled = SampledFamilies()
        r.register(self.sampled)

    def record_add(self, status_ok: bool, entries: int, nbytes: int, latency_s: float) -> None:
        """One answered add batch: its entries, bytes and latency if durable, else one error."""
        if status_ok:
            self.adds.inc(entries)
            self.add_bytes.inc(nbytes)
            self.add_latency.observe(latency_s)
        else:
            self.add_errors.inc()

    def record_read(self, entries: int, latency_s: float) -> None:
        """One answered read request."""
        self.read_entries.inc(entries)
        self.read_latency.observe(latency_s)

    def gauge(self, name: str, help_text: str, fn: Callable[[], float]) -> None:
        """An unlabeled gauge read when scraped."""
        self.sampled.add(name, "gauge", help_text, lambda: [({}, float(fn()))])

    def family(self, name: str, kind: str, help_text: str, fn: Callable[[], Samples]) -> None:
        """A labeled gauge, or a counter kept elsewhere (kind "counter": the name ends in _total),
        read when scraped."""
        self.sampled.add(name, kind, help_text, fn)

    def storage_histogram(self, name: str, help_text: str, fn: Callable[[], Mapping[str, Any] | None]) -> None:
        """A latency histogram the storage engine keeps (bookie/storage/stats.py), read when scraped."""
        self.sampled.add_storage_histogram(name, help_text, fn)

    def render(self) -> str:
        """The page a scrape gets (Prometheus text format)."""
        return generate_latest(self.registry).decode()


def serve_metrics(metrics: Metrics, host: str, port: int) -> MetricsEndpoint:
    """Serve the registry on http://host:port/ (any path; plain HTTP, see docs/security.md)."""
    server, _thread = start_http_server(port, addr=host, registry=metrics.registry)
    return MetricsEndpoint(server)


class MetricsEndpoint:
    """The running exposition server (prometheus_client's WSGI server on a daemon thread)."""

    def __init__(self, server: WSGIServer):
        self._server = server

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    def shutdown(self) -> None:
        self._server.shutdown()
        self._server.server_close()  # frees the port at once
