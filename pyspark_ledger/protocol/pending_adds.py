"""Adds in flight of one ledger writer: answers in, ordered completions and the LAC out.

The rules (reference/bookkeeper-protocol.md, "Adding entries" and "Ensemble changes"):
- an entry completes once A bookies OF ITS CURRENT WRITE SET acknowledged it AND every lower
  entry completed: completions are strictly in entry-id order, and only then does the LAC move;
- while an ensemble change is under way, nothing completes. The change moves every entry from
  the first unacknowledged one on into a new fragment; an entry completed in the meantime on the
  strength of the replaced bookie's ack would be recorded in a fragment where fewer than A of
  the named bookies hold it, and one more failure would lose an acknowledged entry. So
  completions are held from the moment a failure is reported until the new write sets are
  known; then acks from bookies that left an entry's write set no longer count and the entry is
  re-sent to the newcomers.

One record per run (issue 30 item 2): a PendingAdd holds `count` consecutive entries (1 for a
single add) and keeps, per bookie, a bit mask of the entries it acknowledged and one of those it
was sent (bit i: entry `entry_id + i`), so an answer for a whole run is one OR per bookie and
the completion test is a few integer operations per run, not a step per entry. The rules stay
per entry: a bookie's bits are kept only where it is in that entry's write set (its "stripe":
every entry with E == W, every E-th group of W with E > W), an entry is complete when A masks
hold its bit, and a run completes a prefix at a time (a refusal inside it stops the LAC there).

This is the hot path of every add: plain attribute access, ints as bit sets, no allocation per
entry of a run.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

from pyspark_ledger.protocol.invariants import InvariantError, ensure

__all__ = ["PendingAdd", "PendingAdds", "id_ranges", "mask_ids"]


class PendingAdd:
    """A run of consecutive entries in flight (`count` 1: one add). The write handle subclasses it
    to carry the encoded bytes and the caller's future; the simulator carries its own payload.
    PendingAdds sets `bookies` / `stripes` when the run is appended and again after a change."""

    __slots__ = ("entry_id", "count", "last", "done", "size", "sizes", "bookies", "stripes", "acked", "sent")

    def __init__(self, entry_id: int, size: int, sizes: Sequence[int] | None = None):
        count = 1 if sizes is None else len(sizes)
        if count < 1:  # ensure(), inlined: once per add
            raise InvariantError("a run holds at least one entry")
        self.entry_id = entry_id  # the run's first entry
        self.count = count
        self.last = entry_id + count - 1
        self.done = 0  # leading entries completed (a run completes a prefix at a time)
        self.size = size  # payload bytes of the whole run
        self.sizes = sizes  # each entry's payload bytes (None: one entry of `size`)
        # The write set every entry shares (E == W, or one entry), else () and `stripes` instead.
        self.bookies: tuple[str, ...] = ()
        self.stripes: dict[str, int] | None = None  # bookie -> mask of the entries whose write set holds it
        self.acked: dict[str, int] = {}  # bookie -> mask of entries it acknowledged durably (never 0)
        # bookie -> mask of entries sent to it and not failed on (never 0). Possibly a template
        # shared by many single adds (WriterMachine.sends): always replaced, never changed in place.
        self.sent: dict[str, int] = {}

    @property
    def full(self) -> int:
        return (1 << self.count) - 1

    def stripe(self, bookie_id: str) -> int:
        """The entries of this run whose current write set holds `bookie_id`."""
        if self.stripes is None:
            return (1 << self.count) - 1 if bookie_id in self.bookies else 0
        return self.stripes.get(bookie_id, 0)

    def bytes_of(self, start: int, end: int) -> int:
        """Payload bytes of entries [start, end) of the run (offsets)."""
        if self.sizes is None:
            return self.size if start < end else 0
        return sum(self.sizes[start:end])


def id_ranges(entry_ids: Sequence[int]) -> list[tuple[int, int]]:
    """`entry_ids` (ascending, distinct: as `sends` hands them out) as maximal ranges (first, last).
    A list, not a generator: this runs once per bookie answer, mostly for one range."""
    n = len(entry_ids)
    if n == 0:
        return []
    first, last = entry_ids[0], entry_ids[-1]
    if last - first == n - 1:  # the common case: consecutive (a range, or ascending and distinct by contract)
        return [(first, last)]
    out: list[tuple[int, int]] = []
    prev = first
    for e in entry_ids[1:]:
        if e != prev + 1:
            out.append((first, prev))
            first = e
        prev = e
    out.append((first, prev))
    return out


def mask_ids(p: PendingAdd, mask: int) -> list[int]:
    """The entry ids a mask of run `p` names (tests and notes; not the hot path)."""
    return [p.entry_id + i for i in range(p.count) if mask >> i & 1]


def _lowest_zero(t: int) -> int:
    """Index of the lowest clear bit of `t` (>= 0)."""
    return (~t & (t + 1)).bit_length() - 1


class PendingAdds:
    """The writer's ordered queue of unacknowledged runs."""

    def __init__(self, ack_quorum_size: int, write_sets: Sequence[tuple[str, ...]]):
        ensure(ack_quorum_size >= 1, "ack quorum must be >= 1")
        self.ack_quorum_size = ack_quorum_size
        self.write_sets: tuple[tuple[str, ...], ...] = ()
        self._uniform = True
        self._set_write_sets(write_sets)
        self.entries: deque[PendingAdd] = deque()  # runs in entry-id order, consecutive
        self.by_id: dict[int, PendingAdd] = {}  # a run by its first entry id
        self.lac = -1  # last entry completed (the LAC this writer may publish)
        self.length = 0  # payload bytes through the LAC
        self.pending_bytes = 0  # payload bytes not yet completed
        self.pending_count = 0  # entries not yet completed
        self.changing = False  # an ensemble change is under way: completions are held

    def _set_write_sets(self, write_sets: Sequence[tuple[str, ...]]) -> None:
        self.write_sets = tuple(write_sets)
        # E == W: every entry's write set holds the same bookies, so a run has one.
        self._uniform = len({frozenset(ws) for ws in self.write_sets}) == 1

    # ---- queries --------------------------------------------------------------------------------

    def write_set_for(self, entry_id: int) -> tuple[str, ...]:
        return self.write_sets[entry_id % len(self.write_sets)]

    @property
    def first_unacked(self) -> int:
        return self.lac + 1

    @property
    def next_entry_id(self) -> int:
        return self.lac + 1 + self.pending_count

    def __len__(self) -> int:
        """Runs in flight (see `pending_count` for entries)."""
        return len(self.entries)

    def holding(self, entry_id: int) -> PendingAdd | None:
        """The run in flight that holds `entry_id`, if any."""
        p = self.by_id.get(entry_id)
        if p is not None or not self.entries:
            return p
        entries = self.entries
        lo, hi = 0, len(entries) - 1  # binary search: runs are consecutive and ascending
        while lo <= hi:
            mid = (lo + hi) // 2
            q = entries[mid]
            if entry_id < q.entry_id:
                hi = mid - 1
            elif entry_id > q.last:
                lo = mid + 1
            else:
                return q
        return None

    def _first_run(self, first: int) -> PendingAdd | None:
        """The first run in flight holding an entry >= `first` (ids below the oldest run's
        completed long ago: an answer may name them beside pending ones)."""
        p = self.by_id.get(first)
        if p is not None or not self.entries:
            return p
        head = self.entries[0]
        return head if first < head.entry_id else self.holding(first)

    # ---- events ---------------------------------------------------------------------------------

    def append(self, p: PendingAdd) -> None:
        """A new run (or entry), from the next id in order; takes the write sets of its ids."""
        if p.entry_id != self.lac + 1 + self.pending_count:  # ensure(), inlined: once per add
            raise InvariantError("entries are queued in id order without gaps")
        if p.count == 1 or self._uniform:
            sets = self.write_sets
            p.bookies = sets[p.entry_id % len(sets)]
        else:
            self._assign(p)
        self.entries.append(p)
        self.by_id[p.entry_id] = p
        self.pending_bytes += p.size
        self.pending_count += p.count

    def _assign(self, p: PendingAdd) -> None:
        """Set the run's write set(s) from the current write sets."""
        sets = self.write_sets
        if p.count == 1 or self._uniform:
            p.bookies, p.stripes = sets[p.entry_id % len(sets)], None
            return
        e = len(sets)
        pattern: dict[str, int] = {}  # bookie -> its bits among the first E entries of the run
        for i in range(min(e, p.count)):
            for b in sets[(p.entry_id + i) % e]:
                pattern[b] = pattern.get(b, 0) | 1 << i
        reps = -(-p.count // e)
        spread = ((1 << (e * reps)) - 1) // ((1 << e) - 1)  # bit k*E set for every repetition k
        full = (1 << p.count) - 1
        p.bookies, p.stripes = (), {b: (bits * spread) & full for b, bits in pattern.items()}

    def on_acks(self, bookie_id: str, entry_ids: Sequence[int]) -> list[PendingAdd]:
        """A bookie durably stored these entries. Returns the runs that completed whole, in order
        (none while an ensemble change is under way); the LAC says how far a run got."""
        by_id = self.by_id
        for first, last in id_ranges(entry_ids):
            p = by_id.get(first) or self._first_run(first)
            while p is not None and p.entry_id <= last:
                if p.count == 1:  # a single add: its one bit
                    if bookie_id in p.bookies:
                        p.acked[bookie_id] = 1
                    p = by_id.get(p.entry_id + 1)
                    continue
                base = p.entry_id
                lo = first - base if first > base else 0
                hi = (last if last < p.last else p.last) - base
                # An answer from a bookie no longer in the entry's write set (replaced by an
                # ensemble change after it was sent) does not count: the metadata will not name it.
                if p.stripes is None:
                    if bookie_id in p.bookies:
                        mask = ((1 << (hi - lo + 1)) - 1) << lo
                        p.acked[bookie_id] = p.acked.get(bookie_id, 0) | mask
                else:
                    mask = ((1 << (hi - lo + 1)) - 1) << lo & p.stripes.get(bookie_id, 0)
                    if mask:
                        p.acked[bookie_id] = p.acked.get(bookie_id, 0) | mask
                p = by_id.get(p.last + 1)
        return self.collect_completed()

    def on_send_failed(self, bookie_id: str, entry_ids: Sequence[int]) -> None:
        """A send to `bookie_id` failed: those entries must be sent again (to it or its successor),
        and completions wait for the ensemble change the failure calls for."""
        self.changing = True
        for first, last in id_ranges(entry_ids):
            p = self._first_run(first)
            while p is not None and p.entry_id <= last:
                sent = p.sent.get(bookie_id)
                if sent is not None:
                    lo = max(first - p.entry_id, 0)
                    hi = min(last, p.last) - p.entry_id
                    left = sent & ~(((1 << (hi - lo + 1)) - 1) << lo)
                    # Replaced, never changed in place: `sent` may be a shared template (sends).
                    p.sent = {b: m for b, m in p.sent.items() if b != bookie_id}
                    if left:
                        p.sent[bookie_id] = left
                p = self.by_id.get(p.last + 1)

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
            self._set_write_sets(write_sets)
            for p in self.entries:
                self._assign(p)
                p.acked = _within_stripes(p, p.acked)
                p.sent = _within_stripes(p, p.sent)
        self.changing = False
        return self.collect_completed(), list(self.entries)

    def completed_through(self, p: PendingAdd) -> int:
        """How many leading entries of run `p` have A acks from their write sets (>= p.done)."""
        acked, quorum = p.acked, self.ack_quorum_size
        if len(acked) < quorum:
            return p.done
        if p.count == 1:
            return 1  # masks are never 0: A bookies of its write set acked the one entry
        at_least = [(1 << p.count) - 1] + [0] * quorum  # at_least[k]: entries acked by >= k bookies
        for m in acked.values():
            for k in range(quorum, 0, -1):
                at_least[k] |= at_least[k - 1] & m
        return max(p.done, min(_lowest_zero(at_least[quorum] | ((1 << p.done) - 1)), p.count))

    def collect_completed(self) -> list[PendingAdd]:
        """Advance the LAC over every entry whose quorum is complete, in order; pop and return the
        runs completed whole."""
        if self.changing:
            return []
        entries, quorum, by_id = self.entries, self.ack_quorum_size, self.by_id
        done: list[PendingAdd] = []
        lac, nbytes, nentries = self.lac, 0, 0  # written back once, after the loop
        while entries:
            p = entries[0]
            if p.count == 1:  # a single add: complete with A acks (masks are never 0), or not
                if len(p.acked) < quorum:
                    break
                lac = p.entry_id
                nbytes += p.size
                nentries += 1
                p.done = 1
            else:
                k = self.completed_through(p)
                if k == p.done:
                    break
                lac = p.entry_id + k - 1
                nbytes += p.bytes_of(p.done, k)
                nentries += k - p.done
                p.done = k
                if k < p.count:
                    break
            entries.popleft()
            del by_id[p.entry_id]
            done.append(p)
        if nentries:
            self.lac = lac
            self.length += nbytes
            self.pending_bytes -= nbytes
            self.pending_count -= nentries
        return done

    def fail_all(self) -> list[PendingAdd]:
        """The writer stopped: every pending run fails (and will never complete further)."""
        victims = list(self.entries)
        self.entries.clear()
        self.by_id.clear()
        self.pending_bytes = 0
        self.pending_count = 0
        return victims


def _within_stripes(p: PendingAdd, masks: dict[str, int]) -> dict[str, int]:
    """`masks` keeping, per bookie, only the entries whose (new) write set holds it."""
    kept: dict[str, int] = {}
    for b, m in masks.items():
        m &= p.stripe(b)
        if m:
            kept[b] = m
    return kept


def ids_of(runs: Iterable[PendingAdd]) -> list[int]:
    """Every entry id of `runs` (tests and notes)."""
    return [e for p in runs for e in range(p.entry_id, p.last + 1)]
