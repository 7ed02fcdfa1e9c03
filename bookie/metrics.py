"""A few Prometheus metrics without a dependency: counters, gauges and histograms rendered in
the text exposition format by a tiny HTTP server (stdlib), off unless --metrics-port is given."""

from __future__ import annotations

import bisect
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Sequence

# A metric read when scraped: its samples as (labels, value); none = left out of the page.
Samples = Sequence[tuple[dict[str, str], float]]

LATENCY_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Histogram:
    def __init__(self, name: str, help_text: str, buckets: tuple[float, ...] = LATENCY_BUCKETS_S):
        self.name, self.help, self.buckets = name, help_text, buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0
        self.count = 0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        i = bisect.bisect_left(self.buckets, value)
        with self._lock:
            self.counts[i] += 1
            self.sum += value
            self.count += 1

    def render(self) -> list[str]:
        out = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        with self._lock:
            cumulative = 0
            for bound, c in zip(self.buckets, self.counts):
                cumulative += c
                out.append(f'{self.name}_bucket{{le="{bound}"}} {cumulative}')
            out.append(f'{self.name}_bucket{{le="+Inf"}} {self.count}')
            out.append(f"{self.name}_sum {self.sum}")
            out.append(f"{self.name}_count {self.count}")
        return out


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counters: dict[str, tuple[str, int]] = {}
        self.gauges: dict[str, tuple[str, Callable[[], float]]] = {}
        self.families: dict[str, tuple[str, str, Callable[[], Samples]]] = {}
        self.add_latency = Histogram("bookie_add_latency_seconds", "time from receiving an add batch to its durable ack")
        self.read_latency = Histogram("bookie_read_latency_seconds", "time to serve a read request")

    def inc(self, name: str, help_text: str, amount: int = 1) -> None:
        with self._lock:
            self._bump(name, help_text, amount)

    def _bump(self, name: str, help_text: str, amount: int) -> None:
        """Under the lock."""
        _, v = self.counters.get(name, (help_text, 0))
        self.counters[name] = (help_text, v + amount)

    def record_add(self, status_ok: bool, entries: int, nbytes: int, latency_s: float) -> None:
        """One answered add batch: the add counters under one lock, and the latency if durable."""
        with self._lock:
            if status_ok:
                self._bump("bookie_adds_total", "entries durably added", entries)
                self._bump("bookie_add_bytes_total", "entry bytes durably added", nbytes)
            else:
                self._bump("bookie_add_errors_total", "add batches refused or failed", 1)
        if status_ok:
            self.add_latency.observe(latency_s)

    def gauge(self, name: str, help_text: str, fn: Callable[[], float]) -> None:
        self.gauges[name] = (help_text, fn)

    def family(self, name: str, kind: str, help_text: str, fn: Callable[[], Samples]) -> None:
        """A labeled gauge, or a counter kept elsewhere (kind "counter": the name ends in _total),
        read when scraped."""
        if kind not in ("gauge", "counter") or (kind == "counter" and not name.endswith("_total")):
            raise ValueError(f"metric {name}: a gauge, or a counter whose name ends in _total")
        self.families[name] = (help_text, kind, fn)

    def _render_families(self) -> list[str]:
        lines: list[str] = []
        for name, (help_text, kind, fn) in sorted(self.families.items()):
            try:
                samples = list(fn())
            except Exception:  # noqa: BLE001 - a failing metric must not break the endpoint
                continue
            if not samples:
                continue
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
            for labels, value in samples:
                label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
                lines.append(f"{name}{{{label_text}}} {float(value)}" if label_text else f"{name} {float(value)}")
        return lines

    def render(self) -> str:
        lines: list[str] = []
        with self._lock:
            counters = dict(self.counters)
        for name, (help_text, value) in sorted(counters.items()):
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} counter", f"{name} {value}"]
        for name, (help_text, fn) in sorted(self.gauges.items()):
            try:
                value = float(fn())
            except Exception:  # noqa: BLE001 - a failing gauge must not break the endpoint
                continue
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name} {value}"]
        lines += self._render_families()
        lines += self.add_latency.render() + self.read_latency.render()
        return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def serve_metrics(metrics: Metrics, host: str, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server API
            if self.path.rstrip("/") not in ("", "/metrics"):
                self.send_error(404)
                return
            body = metrics.render().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return  # keep stderr for the bookie's own log

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server
