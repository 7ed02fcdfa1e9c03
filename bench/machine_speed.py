"""How fast this machine is right now, printed with every benchmark table.

Figures on the shared 2-core machine move by a lot between days (the same code and the same
Parquet read have differed by 40%): a pure-Python loop and a 1 KiB write + fdatasync, measured
in the same run, say which kind of day a table comes from, so tables from different days can be
compared with each other.

write_fsync_mb_s measures the disk the way a bookie journal uses it: sequential appends into
preallocated space, an fdatasync after each chunk (one group commit). Three bookies on one disk
write every payload byte three times, so a third of it bounds a replicated write (E=W=3).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

LOOP_ITERATIONS = 5_000_000
FSYNC_SAMPLES = 300
# Sequential write + fdatasync: 1 MiB chunks (a large journal group commit), at most
# WRITE_FSYNC_MIB_MAX MiB and WRITE_FSYNC_SECONDS_MAX seconds, whichever ends first.
WRITE_FSYNC_CHUNK_BYTES = 2**20
WRITE_FSYNC_MIB_MAX = 256
WRITE_FSYNC_SECONDS_MAX = 5.0


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


def write_fsync_mb_s(directory: str | None = None, mib: int = WRITE_FSYNC_MIB_MAX,
                     seconds_max: float = WRITE_FSYNC_SECONDS_MAX) -> float:
    """MB/s (10**6 bytes) of sequential 1 MiB writes, each followed by fdatasync, into a
    preallocated file: a bookie journal's pattern. Bounded by `mib` MiB and `seconds_max`."""
    chunk = os.urandom(WRITE_FSYNC_CHUNK_BYTES)  # incompressible, should the file system compress
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        fd = os.open(os.path.join(tmp, "journal-probe"), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.posix_fallocate(fd, 0, mib * WRITE_FSYNC_CHUNK_BYTES)
            os.fsync(fd)
            written = 0
            start = time.perf_counter()
            for i in range(mib):
                os.pwrite(fd, chunk, i * WRITE_FSYNC_CHUNK_BYTES)
                os.fdatasync(fd)
                written += WRITE_FSYNC_CHUNK_BYTES
                if time.perf_counter() - start >= seconds_max:
                    break
            elapsed = time.perf_counter() - start
        finally:
            os.close(fd)
    return written / elapsed / 1e6


def machine_speed_line(directory: str | None = None) -> str:
    return (f"machine now: {LOOP_ITERATIONS / 1e6:g}M-step Python loop {python_loop_s():.2f} s, "
            f"1 KiB write + fdatasync p50 {fdatasync_us(directory):.0f} us")


if __name__ == "__main__":
    print(machine_speed_line())
    print(f"sequential 1 MiB write + fdatasync: {write_fsync_mb_s():,.0f} MB/s")
