"""Adds in flight of one ledger writer: answers in, ordered completions and the LAC out.

The rules (reference/bookkeeper-protocol.md, "Adding entries" and "Ensemble changes"):
- an add completes once A bookies OF ITS CURRENT WRITE SET acknowledged it AND every lower
  entry completed: completions are strictly in entry-id order, and only then does the LAC move;
- while an ensemble change is under way, nothing completes. The change moves every entry from
  the first unacknowledged one on into a new fragment; an entry completed in the meantime on the
  strength of the replaced bookie's ack would be recorded in a fragment where fewer than A of
  the named bookies hold it, and one more failure would lose an acknowledged entry. So
  completions are held from the moment a failure is reported until the new write sets are
  known; then acks from bookies that left an entry's write set no longer count and the entry is
  re-sent to the newcomers.

This is the hot path of every add: plain attribute access, lists rather than sets (a write set
has a handful of bookies), no allocation per ack beyond the completed run.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

from pyspark_ledger.protocol.invariants import ensure


class PendingAdd:
    """One entry in flight. The write handle subclasses it to carry the encoded bytes and the
    caller's future; the simulator carries its own payload."""

    __slots__ = ("entry_id", "size", "bookies", "acked", "sent")

    def __init__(self, entry_id: int, size: int, bookies: tuple[str, ...]):
        self.entry_id = entry_id
        self.size = size  # payload bytes: the ledger's length grows by this on completion
        self.bookies = bookies  # the current write set
        self.acked: list[str] = []  # members of `bookies` that acknowledged durably
        self.sent: list[str] = []  # members of `bookies` it was sent to and not failed on


class PendingAdds:
    """The writer's ordered queue of unacknowledged entries."""

    def __init__(self, ack_quorum_size: int, write_sets: Sequence[tuple[str, ...]]):
        ensure(ack_quorum_size >= 1, "ack quorum must be >= 1")
        self.ack_quorum_size = ack_quorum_size
        self.write_sets: tuple[tuple[str, ...], ...] = tuple(write_sets)
        self.entries: deque[PendingAdd] = deque()  # in entry-id order
        self.by_id: dict[int, PendingAdd] = {}
        self.lac = -1  # last entry completed (the LAC this writer may publish)
        self.length = 0  # payload bytes through the LAC
        self.pending_bytes = 0  # payload bytes not yet completed
        self.changing = False  # an ensemble change is under way: completions are held

    # ---- queries --------------------------------------------------------------------------------

    def write_set_for(self, entry_id: int) -> tuple[str, ...]:
        return self.write_sets[entry_id % len(self.write_sets)]

    @property
    def first_unacked(self) -> int:
        return self.lac + 1

    @property
    def next_entry_id(self) -> int:
        return self.lac + 1 + len(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    # ---- events ---------------------------------------------------------------------------------

    def append(self, p: PendingAdd) -> None:
        """A new entry, the next id in order, with the write set of its id."""
        ensure(p.entry_id == self.next_entry_id, "entries are queued in id order without gaps")
        self.entries.append(p)
        self.by_id[p.entry_id] = p
        self.pending_bytes += p.size

    def on_acks(self, bookie_id: str, entry_ids: Iterable[int]) -> list[PendingAdd]:
        """A bookie durably stored these entries. Returns the entries that completed, in order
        (none while an ensemble change is under way)."""
        by_id = self.by_id
        for eid in entry_ids:
            p = by_id.get(eid)
            # An answer from a bookie no longer in the entry's write set (replaced by an ensemble
            # change after it was sent) does not count: the metadata will not name it.
            if p is not None and bookie_id in p.bookies and bookie_id not in p.acked:
                p.acked.append(bookie_id)
        return self.collect_completed()

    def on_send_failed(self, bookie_id: str, entry_ids: Iterable[int]) -> None:
        """A send to `bookie_id` failed: those entries must be sent again (to it or its successor),
        and completions wait for the ensemble change the failure calls for."""
        self.changing = True
        by_id = self.by_id
        for eid in entry_ids:
            p = by_id.get(eid)
            if p is not None and bookie_id in p.sent:
                p.sent.remove(bookie_id)

    def begin_change(self) -> int:
        """Hold completions; returns the first entry of the new fragment (the first unacked)."""
        self.changing = True
        return self.first_unacked

    def end_change(self, write_sets: Sequence[tuple[str, ...]] | None) -> tuple[list[PendingAdd], list[PendingAdd]]:
        """The change is recorded in metadata (or abandoned: `write_sets` None keeps the current
        ones). Every pending entry takes its new write set, keeps only acks and sends of bookies
        still in it, and is returned for re-sending; then held completions are released.
        Returns (completed, to_resend)."""
        if write_sets is not None:
            self.write_sets = tuple(write_sets)
            for p in self.entries:
                ws = self.write_set_for(p.entry_id)
                if ws != p.bookies:
                    p.bookies = ws
                    p.acked = [b for b in p.acked if b in ws]
                    p.sent = [b for b in p.sent if b in ws]
        self.changing = False
        return self.collect_completed(), list(self.entries)

    def collect_completed(self) -> list[PendingAdd]:
        """Pop the entries whose quorum is complete, in order, advancing the LAC."""
        if self.changing:
            return []
        entries, quorum = self.entries, self.ack_quorum_size
        done: list[PendingAdd] = []
        while entries and len(entries[0].acked) >= quorum:
            p = entries.popleft()
            del self.by_id[p.entry_id]
            self.lac = p.entry_id
            self.length += p.size
            self.pending_bytes -= p.size
            done.append(p)
        return done

    def fail_all(self) -> list[PendingAdd]:
        """The writer stopped: every pending entry fails (and will never complete)."""
        victims = list(self.entries)
        self.entries.clear()
        self.by_id.clear()
        self.pending_bytes = 0
        return victims
