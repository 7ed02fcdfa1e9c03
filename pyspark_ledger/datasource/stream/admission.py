"""Admission control: how much of each log one micro-batch takes, and what it leaves (the lag).
Pure: works on scans (scan.py), no I/O.

Spark passes the limit as a ReadLimit: maxEntriesPerTrigger (ReadMaxRows: one entry of a raw
log is one row; an Arrow entry holds many rows, so it counts entries, as Kafka counts records),
maxBytesPerTrigger (ReadMaxBytes), both (the smaller share wins), or everything available.
Like Kafka's maxOffsetsPerTrigger, a limit is shared among the logs in proportion to what each
has unread (largest remainders first, logs in name order). A batch takes at least one entry
when any is readable, so one entry larger than maxBytesPerTrigger cannot stall the stream.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyspark_ledger.datasource.stream.offsets import LogOffset
from pyspark_ledger.datasource.stream.scan import LogScan


@dataclass(frozen=True, slots=True)
class Limit:
    max_entries: int | None = None
    max_bytes: int | None = None


def _shares(budget: int, sizes: Mapping[str, int]) -> dict[str, int]:
    """`budget` split in proportion to `sizes`, never above a size (largest remainders first)."""
    total = sum(sizes.values())
    if total <= budget:
        return dict(sizes)
    shares = {name: budget * size // total for name, size in sizes.items()}
    left = budget - sum(shares.values())
    by_remainder = sorted(sizes, key=lambda name: (-(budget * sizes[name] % total), name))
    for name in by_remainder[:left]:  # each floor lost less than one: fewer than len(sizes) left
        shares[name] += 1
    return shares


def bytes_of_first(scan: LogScan, n: int) -> int:
    """Bytes of the first n unread entries of the scan."""
    total = 0
    for c in scan.chunks:
        if n <= 0:
            break
        k = min(n, c.entries)
        total += c.bytes_of(k)
        n -= k
    return total


def entries_within(scan: LogScan, budget: int) -> int:
    """The most unread entries whose bytes stay within `budget`."""
    n = 0
    for c in scan.chunks:
        if c.bytes <= budget:
            n += c.entries
            budget -= c.bytes
            continue
        return n + (budget * c.entries // c.bytes if c.bytes else c.entries)
    return n


def admit(scans: Mapping[str, LogScan], limit: Limit) -> dict[str, int]:
    """Entries each log's micro-batch takes."""
    take = {name: scan.entries for name, scan in scans.items()}
    if limit.max_entries is not None:
        take = _shares(limit.max_entries, take)
    if limit.max_bytes is not None:
        budgets = _shares(limit.max_bytes, {name: scan.bytes for name, scan in scans.items()})
        take = {name: min(n, entries_within(scans[name], budgets[name])) for name, n in take.items()}
    if not any(take.values()):
        first = next((name for name in sorted(scans) if scans[name].entries), None)
        if first is not None:
            take[first] = 1  # at least one entry, however large
    return take


def offset_after(scan: LogScan, n: int) -> LogOffset:
    """The position after the first n unread entries (the scan's start for none)."""
    if n <= 0:
        return scan.start
    for c in scan.chunks:
        if n < c.entries:
            return LogOffset(c.seq, c.first + n, c.ledger)
        n -= c.entries
        if n == 0:
            return c.after
    return scan.tail


def lag_after(scan: LogScan, n: int) -> tuple[int, int]:
    """(entries, bytes) still unread after the batch takes n."""
    return scan.entries - n, scan.bytes - bytes_of_first(scan, n)
