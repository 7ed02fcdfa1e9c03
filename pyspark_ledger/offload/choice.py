"""Which sealed ledgers of a log to offload now: a pure choice (no I/O, no clock).

A ledger is chosen when it is sealed, not offloaded yet, and either sealed at least `after_ms`
ago (its seal time; its join time when the record predates seal times) or beyond the newest
`after_bytes` bytes of the log (walking from the newest sealed ledger back, the ledgers whose
bytes no longer fit are offloaded, as Kafka's local.retention.bytes keeps that many on brokers).
`everything` (the shell's --now) chooses every sealed ledger not offloaded yet. The open
ledger at the tail is never chosen. At most `limit` ledgers, oldest first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from metadata.offload_settings import OffloadSettings


@dataclass(frozen=True, slots=True)
class LedgerView:
    seq: int
    sealed: bool
    sealed_ms: int  # seal time (or join time)
    size_bytes: int
    offloaded: bool


def choose(ledgers: Sequence[LedgerView], settings: OffloadSettings, now_ms: int, *, everything: bool = False,
           limit: int = 1_000) -> list[int]:
    """The seqs to offload now, oldest first (`ledgers` in seq order)."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    sealed = [lg for lg in ledgers if lg.sealed]
    chosen: set[int] = set()
    if everything:
        chosen.update(lg.seq for lg in sealed)
    if settings.after_ms is not None:
        chosen.update(lg.seq for lg in sealed if now_ms - lg.sealed_ms >= settings.after_ms)
    if settings.after_bytes is not None:
        kept = 0
        for lg in reversed(sealed):
            kept += lg.size_bytes
            if kept > settings.after_bytes:
                chosen.add(lg.seq)
    offloaded = {lg.seq for lg in ledgers if lg.offloaded}
    return sorted(chosen - offloaded)[:limit]
