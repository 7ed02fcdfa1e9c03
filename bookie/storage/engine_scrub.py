"""The storage engine's scrub part (the passes run in bookie/scrubber.py): verify stored entries window
by window (header and crc32c of every entry, the same checks a read makes) and say which ones
are damaged or unreadable, so they can be repaired from a peer before the other copies are lost.
Nothing here changes stored data; the repair is an ordinary recovery add (add_batch)."""

from __future__ import annotations

from dataclasses import dataclass

from bookie.storage.engine_types import LedgerKey
from bookie.storage.ledger_index import LedgerIndex
from bookie.storage.ledger_table import LedgerTable
from bookie.storage.read_path import ReadPath

# One window is at most this many entries (a read's own cap applies too).
SCRUB_WINDOW_ENTRIES = 4096


@dataclass(frozen=True)
class ScrubWindow:
    next_first: int | None  # where the next window starts; None: past the last stored entry
    damaged: list[int]  # entry ids whose stored copy failed its checks or could not be read
    bytes_read: int
    entries_checked: int


def _id_range(index: LedgerIndex) -> tuple[int, int] | None:
    if not index.pages:
        return None
    return index.pages[min(index.pages)].base, index.pages[max(index.pages)].end - 1


class EntryScrubber:
    """Reads through the read path, so a scrub checks exactly what a reader would be served."""

    def __init__(self, table: LedgerTable, reads: ReadPath) -> None:
        self._table = table
        self._reads = reads

    def ledgers(self) -> list[LedgerKey]:
        """The ledgers holding entries, in key order (a pass visits each once)."""
        return sorted(k for k, m in self._table.live() if m.index.count)

    def window(self, ledger: LedgerKey, first: int, max_bytes: int) -> ScrubWindow:
        """Verify the stored entries of `ledger` from `first` (at least one entry, about
        max_bytes). Entries past a CLOSED ledger's last entry are not checked (never served,
        dropped by compaction)."""
        with self._table.lock:
            meta = self._table.live_locked(ledger)
            bounds = None if meta is None else _id_range(meta.index)
        if bounds is None or first > bounds[1]:
            return ScrubWindow(None, [], 0, 0)
        first = max(first, bounds[0])
        last = min(bounds[1], first + SCRUB_WINDOW_ENTRIES - 1)
        status, answer = self._reads.read_runs(ledger, first, last, SCRUB_WINDOW_ENTRIES, max_bytes)
        if answer is None:  # deleted meanwhile, or the engine closed
            return ScrubWindow(None, [], 0, 0)
        end = first + answer.count
        checked = sum(len(run.lengths) for run in answer.runs) + len(answer.corrupt)
        return ScrubWindow(end if end <= bounds[1] else None, [c.entry_id for c in answer.corrupt],
                           answer.data_bytes, checked)
