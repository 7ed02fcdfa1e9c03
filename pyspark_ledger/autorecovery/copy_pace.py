"""The re-replication rate: one token bucket in bytes, shared by every copy of a process.

`ledger autorecovery --rereplication-rate-mb-s` (default 50) and `ledger recover --rate-mb-s`
bound what copies write to replacement bookies in all, so a healing cluster leaves its disks and
network to the writers that run meanwhile. A copy asks for a batch's bytes before it sends the
batch. The bucket is a schedule (GCRA): each request is given the instant the rate allows it, and
waits until then outside the lock, so concurrent copies share the rate fairly in request order and
a burst is at most BURST_S seconds' worth. MB here is 10^6 bytes, as in the benchmarks.
"""

from __future__ import annotations

import threading
import time

from pyspark_ledger.protocol.invariants import ensure

MB = 1_000_000
BURST_S = 0.25  # an idle bucket lets this many seconds' worth through at once
RATE_MB_S_MAX = 100_000.0


def check_rate_mb_s(rate_mb_s: float, flag: str) -> float:
    """A rate from the command line or configuration, or ValueError naming the flag."""
    if not 0.1 <= rate_mb_s <= RATE_MB_S_MAX:
        raise ValueError(f"{flag} must be in 0.1..{RATE_MB_S_MAX:g} MB/s, got {rate_mb_s:g}")
    return rate_mb_s


class CopyPace:
    def __init__(self, rate_mb_s: float, *, stop: threading.Event | None = None):
        self.rate_bytes_per_s = check_rate_mb_s(rate_mb_s, "the re-replication rate") * MB
        self._stop = stop or threading.Event()
        self._lock = threading.Lock()
        self._next_s = time.monotonic() - BURST_S  # when the next byte may go

    def acquire(self, n_bytes: int) -> float:
        """Wait until `n_bytes` more may be copied. Returns the seconds waited (0 when the bucket
        had them). Returns early when the stop event is set: the caller is stopping anyway."""
        ensure(n_bytes >= 0, f"bytes to pace must be >= 0, got {n_bytes}")
        with self._lock:
            now = time.monotonic()
            self._next_s = max(self._next_s, now - BURST_S)
            start = self._next_s
            self._next_s += n_bytes / self.rate_bytes_per_s
        wait_s = start - now
        if wait_s <= 0:
            return 0.0
        # Bounded: the bytes scheduled ahead are at most the copies' in-flight requests (one batch
        # per copying thread), so the wait is at most their sum over the rate.
        self._stop.wait(wait_s)
        return wait_s
