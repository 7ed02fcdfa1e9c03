"""How fast this machine is right now, printed with every benchmark table.

Figures on the shared 2-core machine move by a lot between days (the same code and the same
Parquet read have differed by 40%): a pure-Python loop and a 1 KiB write + fdatasync, measured
in the same run, say which kind of day a table comes from, so tables from different days can be
compared with each other.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

LOOP_ITERATIONS = 5_000_000
FSYNC_SAMPLES = 300


def python_loop_s() -> float:
    """Seconds for LOOP_ITERATIONS additions in a pure-Python loop (best of 3)."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        x = 0
        for i in range(LOOP_ITERATIONS):
            x += i
        best = min(best, time.perf_counter() - start)
    return best


def fdatasync_us(directory: str | None = None) -> float:
    """Median microseconds of a 1 KiB write + fdatasync into preallocated space."""
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        fd = os.open(os.path.join(tmp, "probe"), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.posix_fallocate(fd, 0, FSYNC_SAMPLES * 1024)
            os.fsync(fd)
            samples = []
            for i in range(FSYNC_SAMPLES):
                start = time.perf_counter()
                os.pwrite(fd, b"m" * 1024, i * 1024)
                os.fdatasync(fd)
                samples.append(time.perf_counter() - start)
        finally:
            os.close(fd)
    return statistics.median(samples) * 1e6


def machine_speed_line(directory: str | None = None) -> str:
    return (f"machine now: {LOOP_ITERATIONS / 1e6:g}M-step Python loop {python_loop_s():.2f} s, "
            f"1 KiB write + fdatasync p50 {fdatasync_us(directory):.0f} us")


if __name__ == "__main__":
    print(machine_speed_line())
