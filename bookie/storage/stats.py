"""Engine counters and a log2 latency histogram. Counters written by one thread (the journal
thread) need no lock; read-side counters are updated under the engine lock."""

from __future__ import annotations

from typing import Any

# Histogram bucket i counts samples in [2**(i-1), 2**i) microseconds; bucket 0 is < 1 us.
HISTOGRAM_BUCKETS = 32


class LatencyHistogram:
    __slots__ = ("buckets", "count", "total_us", "max_us")

    def __init__(self) -> None:
        self.buckets = [0] * HISTOGRAM_BUCKETS
        self.count = 0
        self.total_us = 0.0
        self.max_us = 0.0

    def record(self, seconds: float) -> None:
        us = seconds * 1e6
        self.buckets[min(int(us).bit_length(), HISTOGRAM_BUCKETS - 1)] += 1
        self.count += 1
        self.total_us += us
        if us > self.max_us:
            self.max_us = us

    def quantile_us(self, q: float) -> float:
        """Upper bound of the bucket holding quantile q (0 if empty)."""
        if not self.count:
            return 0.0
        rank = q * self.count
        seen = 0
        for i, n in enumerate(self.buckets):
            seen += n
            if seen >= rank and n:
                return float(2**i)
        return self.max_us

    def to_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "mean_us": self.total_us / self.count if self.count else 0.0,
            "p50_us": self.quantile_us(0.5),
            "p99_us": self.quantile_us(0.99),
            "max_us": self.max_us,
            "buckets_le_us": {2**i: n for i, n in enumerate(self.buckets) if n},
        }


class StorageStats:
    def __init__(self) -> None:
        # journal thread only
        self.adds = 0  # entries acknowledged
        self.add_batches = 0
        self.add_bytes = 0
        self.groups = 0
        self.group_records = 0
        self.journal_bytes = 0
        self.fsyncs = 0
        self.fsync_latency = LatencyHistogram()
        # caller threads (under the engine lock)
        self.busy_rejections = 0
        self.reads = 0
        self.read_bytes = 0
        self.read_calls = 0
        self.read_preads = 0  # reads / read_preads = how well contiguous entries coalesce
        self.corrupt_reads = 0
        # checkpoint thread (under the checkpoint lock)
        self.checkpoints = 0
        self.checkpoint_ledgers_written = 0
        self.checkpoint_latency = LatencyHistogram()

    def to_dict(self) -> dict[str, Any]:
        return {
            "adds": self.adds,
            "add_batches": self.add_batches,
            "add_bytes": self.add_bytes,
            "groups": self.groups,
            "group_records": self.group_records,
            "journal_bytes": self.journal_bytes,
            "fsyncs": self.fsyncs,
            "fsync_latency": self.fsync_latency.to_dict(),
            "busy_rejections": self.busy_rejections,
            "reads": self.reads,
            "read_bytes": self.read_bytes,
            "read_calls": self.read_calls,
            "read_preads": self.read_preads,
            "corrupt_reads": self.corrupt_reads,
            "checkpoints": self.checkpoints,
            "checkpoint_ledgers_written": self.checkpoint_ledgers_written,
            "checkpoint_latency": self.checkpoint_latency.to_dict(),
        }
