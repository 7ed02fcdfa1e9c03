"""A ledger writer's decisions as a pure state machine (reference/bookkeeper-protocol.md,
"Adding entries", "Ensemble changes", "Closing a ledger as a writer").

The driver (ledger/write_handle.py with threads, locks and sockets; the simulator's writer with
simulated ones) owns all I/O, timing and waiting; this machine owns every decision:

- where each entry goes: `sends(entries)` groups entries by the bookies of their write set they
  still need (not sent, not acknowledged, not carried on without) and records them as sent;
- when an entry is acknowledged: A answers from its write set, completions in entry-id order,
  the LAC moving only then, none while an ensemble change is under way (PendingAdds);
- what a failed send means: a bookie of the current ensemble that failed is replaced by an
  ensemble change (begin, plan, compare-and-set, end); FENCED stops the writer for good;
- how the change is recorded: `WriteFragment` out, the compare-and-set's outcome in
  (`on_fragment_written`, or `on_fragment_conflict` with the state re-read), bounded attempts;
- when to send an explicit LAC (`lac_due`, time passed in as an argument);
- how to close: `close_command` applies writer_close_verdict to the metadata as read.

    m = WriterMachine(ensemble, write_quorum_size=W, ack_quorum_size=A)
    m.append(p, lac, now_s)                  # a new entry (the driver encodes it); queued in m.outbox
    for targets, entries in m.sends(m.take_outbox()).items(): send entries to each of targets
    done = m.on_acks(bookie, entry_ids)      # completed entries, in order: resolve them
    if m.on_add_failed(bookie, entry_ids):   # True: start a change now
        cmd = m.begin_change(candidates, pick)
        while cmd is WriteFragment: CAS it; cmd = m.on_fragment_written() / m.on_fragment_conflict(state)
        ChangeDone(completed): resolve them, then send m.take_outbox()   |   Stop: fail everything

Hot path: `append`, `sends` and `on_acks` are one step per run, not per entry: a run (from
WriteHandle.add_entries_async, or one entry) is one PendingAdd holding per-bookie bit masks of
its entries' acks and sends (protocol.pending_adds), so a run of 256 costs one record, one
future and one ack step per bookie answer. The ack rules stay per entry (A answers from each
entry's own write set, completions in order; an entry refused inside a run never completes, so
the LAC stops before it and the run's later entries wait with it); `sends` hands out segments
(run, first id, last id), cutting a run only where the bookies its entries need differ (E > W: a
bookie gets the entries of its stripe, in sub-runs); an ensemble change keeps each entry's acks
and sends of bookies still in its new write set and re-queues the run from its first
unacknowledged entry on. docs/protocol.md says more.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from pyspark_ledger.protocol.close_rules import CloseVerdict, writer_close_verdict
from pyspark_ledger.protocol.distribution import write_sets
from pyspark_ledger.protocol.ensemble_change import PickReplacement, plan_ensemble_change
from pyspark_ledger.protocol.invariants import InvariantError, ensure
from pyspark_ledger.protocol.pending_adds import PendingAdd, PendingAdds

__all__ = [
    "CAS_ATTEMPTS_MAX",
    "Segment",
    "ENSEMBLE_CHANGES_MAX",
    "ChangeDone",
    "Phase",
    "Seal",
    "Sealed",
    "Stop",
    "StopKind",
    "WriteFragment",
    "WriterCommand",
    "WriterMachine",
]

ENSEMBLE_CHANGES_MAX = 32  # consecutive changes without an add completing
CAS_ATTEMPTS_MAX = 50  # compare-and-set attempts per fragment or close


class Phase(enum.Enum):
    WRITING = "writing"
    CLOSING = "closing"  # no new adds; outstanding ones drain, then the close is written
    CLOSED = "closed"


class StopKind(enum.Enum):
    FENCED = "fenced"  # another client recovers (or recovered) the ledger
    NO_QUORUM = "no quorum"  # a write set can no longer reach A acks and no replacement exists
    STUCK = "stuck"  # ENSEMBLE_CHANGES_MAX changes without an add completing
    CONFLICT = "conflict"  # a compare-and-set kept conflicting
    FAILED = "failed"  # the driver's own failure (transport, metadata store, session)


# Entries of one run to send to one group of bookies: (run, first entry id, last entry id).
Segment = tuple[PendingAdd, int, int]

_WRITING = Phase.WRITING  # a module global: cheaper than the enum's attribute on the per-entry path


@dataclass(frozen=True, slots=True)
class Stop:
    """The writer stopped for good: `victims` (every entry in flight) fail, later adds fail too."""

    kind: StopKind
    message: str
    victims: list[PendingAdd] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class WriteFragment:
    """Compare-and-set a new fragment from `first_entry_id` on `ensemble` (on the version read)."""

    first_entry_id: int
    ensemble: tuple[str, ...]
    replaced: Mapping[str, str]  # failed bookie -> its replacement


@dataclass(frozen=True, slots=True)
class ChangeDone:
    """The change is recorded (or needed none): resolve `completed` (in order), then send the
    outbox (every unacknowledged entry, to the bookies of its write set it still needs)."""

    completed: list[PendingAdd]
    unreplaced: tuple[str, ...] = ()  # failed bookies the writer now carries on without


@dataclass(frozen=True, slots=True)
class Seal:
    """Compare-and-set the close at `last_entry_id` / `length` on the version read."""

    last_entry_id: int
    length: int


@dataclass(frozen=True, slots=True)
class Sealed:
    """The ledger is closed where this writer closes it."""

    last_entry_id: int
    length: int


WriterCommand = WriteFragment | ChangeDone | Stop | Seal | Sealed


class WriterMachine:
    """One ledger writer's protocol state (see the module docstring). Not thread-safe: the
    driver serialises calls (the write handle holds its lock)."""

    def __init__(self, ensemble: Sequence[str], *, write_quorum_size: int, ack_quorum_size: int,
                 changes_max: int = ENSEMBLE_CHANGES_MAX, cas_attempts_max: int = CAS_ATTEMPTS_MAX):
        ensure(len(ensemble) >= write_quorum_size >= ack_quorum_size >= 1, "E >= W >= A >= 1")
        ensure(len(set(ensemble)) == len(ensemble), "an ensemble names distinct bookies")
        ensure(changes_max >= 1 and cas_attempts_max >= 1, "the bounds are positive")
        self.write_quorum_size, self.ack_quorum_size = write_quorum_size, ack_quorum_size
        self.changes_max, self.cas_attempts_max = changes_max, cas_attempts_max
        self.ensemble: tuple[str, ...] = tuple(ensemble)
        self.adds = PendingAdds(ack_quorum_size, self._set_write_sets())
        self.outbox: list[PendingAdd] = []  # entries with bookies still to send to
        self.failed: set[str] = set()  # failures reported that no change has handled yet
        self.dead: set[str] = set()  # failed bookies the writer carries on without (no replacement)
        self.phase = Phase.WRITING
        self.stopped: Stop | None = None
        self.change: WriteFragment | None = None  # the fragment being recorded
        self._change_unreplaced: tuple[str, ...] = ()
        self.changes_without_progress = 0
        self.cas_attempts = 0  # of the fragment being recorded
        self.seal_attempts = 0
        self.last_lac_sent = -1
        self.last_add_s = 0.0

    # ---- queries --------------------------------------------------------------------------------

    @property
    def lac(self) -> int:
        return self.adds.lac

    @property
    def length(self) -> int:
        return self.adds.length

    @property
    def live(self) -> bool:
        """Still writing or closing (not closed, not stopped)."""
        return self.stopped is None and self.phase is not Phase.CLOSED

    def write_set_for(self, entry_id: int) -> tuple[str, ...]:
        return self.adds.write_set_for(entry_id)

    # ---- adds -----------------------------------------------------------------------------------

    def append(self, p: PendingAdd, lac: int, now_s: float, direct: bool = False) -> bool:
        """A new entry or run (`p.count` consecutive ids from the next one), carrying `lac`: one
        decision and one pending record for the whole run. The ack rules stay per entry (A
        answers from each entry's write set, completions in order; a run completes a prefix at a
        time, so an entry refused inside it stops the LAC there). With `direct` (the driver could
        send it at once) returns True if it may go out now, ahead of nothing; otherwise it is
        queued in the outbox and False is returned."""
        if self.phase is not _WRITING or self.stopped is not None:  # ensure(), inlined: once per add
            raise InvariantError("adds are accepted only while writing")
        adds = self.adds
        adds.append(p)  # ensures the ids follow on
        self.last_add_s = now_s
        if lac > self.last_lac_sent:
            self.last_lac_sent = lac  # piggybacked: no explicit LAC needed up to here
        if direct and len(adds.entries) == 1 and not self.outbox and not adds.changing:
            return True
        self.outbox.append(p)
        return False

    def take_outbox(self) -> list[PendingAdd]:
        """The runs to send now; none while a change is under way (their write sets are about
        to change: the change's end re-queues every unacknowledged run)."""
        if self.change is not None or not self.outbox:
            return []
        out, self.outbox = self.outbox, []
        return out

    def sends(self, runs: Iterable[PendingAdd]) -> dict[tuple[str, ...], list[Segment]]:
        """Group the entries of `runs` by the bookies (sorted) each still needs, as segments
        (run, first id, last id) of consecutive entries, and record them as sent. With E == W (the
        common case) a fresh run needs the same bookies throughout: one segment, one group."""
        groups: dict[tuple[str, ...], list[Segment]] = {}
        dead = self.dead
        whole_sets = self._sorted_sets
        for p in runs:
            # The common case, a fresh run with one write set, from the cache; anything else computed.
            if not p.sent and not p.acked and p.bookies and not dead and not p.done:
                targets, sent_one = whole_sets[p.bookies]
                # A single add shares the template of its targets (PendingAdd.sent is replaced,
                # never changed in place).
                p.sent = sent_one if p.count == 1 else dict.fromkeys(targets, (1 << p.count) - 1)
                group = groups.get(targets)
                if group is None:
                    groups[targets] = [(p, p.entry_id, p.last)]
                else:
                    group.append((p, p.entry_id, p.last))
            else:
                self._partial_sends(p, groups)
        return groups

    def _partial_sends(self, p: PendingAdd, groups: dict[tuple[str, ...], list[Segment]]) -> None:
        """The entries of run `p` that some bookie of their write set still needs (not sent, not
        acknowledged, not carried on without), cut where the set of such bookies changes."""
        pending = ((1 << p.count) - 1) & ~((1 << p.done) - 1)
        needs: dict[str, int] = {}
        for b in sorted(p.stripes if p.stripes is not None else p.bookies):
            if b in self.dead:
                continue
            m = p.stripe(b) & pending & ~p.acked.get(b, 0) & ~p.sent.get(b, 0)
            if m:
                needs[b] = m
        if not needs:
            return
        bounds = 0  # bit i: some bookie's need changes between entries i-1 and i (or the end)
        for m in needs.values():
            bounds |= m ^ (m << 1)
        cuts: list[int] = []
        while bounds:
            low = bounds & -bounds
            cuts.append(low.bit_length() - 1)
            bounds ^= low
        sent = dict(p.sent)  # replaced, never changed in place (it may be a shared template)
        for start, end in zip(cuts, cuts[1:]):
            targets = tuple(b for b, m in needs.items() if m >> start & 1)
            if not targets:
                continue
            seg = ((1 << (end - start)) - 1) << start
            for b in targets:
                sent[b] = sent.get(b, 0) | seg
            groups.setdefault(targets, []).append((p, p.entry_id + start, p.entry_id + end - 1))
        p.sent = sent

    def on_acks(self, bookie_id: str, entry_ids: Sequence[int]) -> list[PendingAdd]:
        """A bookie durably stored these entries (ascending, as `sends` gave them): the runs that
        completed whole, in order. The LAC (`lac`) says how far completion got, a run's prefix
        included."""
        adds = self.adds
        before = adds.lac
        done = adds.on_acks(bookie_id, entry_ids)
        if adds.lac != before:
            if adds.lac < before or (done and (done[0].last <= before or done[-1].last > adds.lac)):  # ensure()
                raise InvariantError("completions are consecutive from the LAC and the LAC is the last of them")
            self.changes_without_progress = 0
        return done

    def on_add_failed(self, bookie_id: str, entry_ids: Sequence[int]) -> bool:
        """A send failed (error answer or timeout). Returns True if an ensemble change should
        begin now (none is under way). A bookie outside the current ensemble, or one already
        carried on without, changes nothing; one inside it is replaced even if these entries
        reached A acks elsewhere: later entries would be under-replicated otherwise."""
        if not self.live or bookie_id in self.dead or bookie_id not in self.ensemble:
            return False
        self.adds.on_send_failed(bookie_id, entry_ids)  # and completions are held until the change
        self.failed.add(bookie_id)
        return self.change is None

    def on_fenced(self, bookie_id: str, status: str) -> Stop:
        """A bookie answered FENCED (or refused the writer): another client is recovering the ledger."""
        return self.stop(StopKind.FENCED, f"fenced (bookie {bookie_id} answered {status}): "
                                          "another client is recovering the ledger")

    # ---- ensemble changes -----------------------------------------------------------------------

    def begin_change(self, candidates: Sequence[str], pick: PickReplacement) -> WriteFragment | ChangeDone | Stop:
        """Handle the failures reported so far: plan the new fragment from the first
        unacknowledged entry (protocol.ensemble_change). Completions stay held until it ends."""
        ensure(self.change is None, "one ensemble change at a time")
        if self.stopped is not None:
            return self.stopped
        ensure(bool(self.failed), "a change handles reported failures")
        failed, self.failed = frozenset(self.failed), set()
        first_unacked = self.adds.begin_change()
        if not any(b in self.ensemble for b in failed) or (self.phase is not Phase.WRITING and not self.adds.entries):
            return self._end_change(None, ())  # not our ensemble, or nothing left to write
        self.changes_without_progress += 1
        if self.changes_without_progress > self.changes_max:
            return self.stop(StopKind.STUCK, f"{self.changes_max} ensemble changes without progress")
        plan = plan_ensemble_change(self.ensemble, failed, self.dead, candidates, pick,
                                    write_quorum_size=self.write_quorum_size, ack_quorum_size=self.ack_quorum_size,
                                    first_entry_id=first_unacked)
        if plan.error is not None:
            return self.stop(StopKind.NO_QUORUM, plan.error)
        if not plan.needs_metadata_change:
            return self._end_change(None, plan.unreplaced)
        ensure(plan.first_entry_id == self.adds.lac + 1, "a new fragment starts at the first unacknowledged entry")
        self.change = WriteFragment(plan.first_entry_id, plan.ensemble, plan.replaced)
        self._change_unreplaced = plan.unreplaced
        self.cas_attempts = 1
        return self.change

    def on_fragment_written(self) -> ChangeDone | Stop:
        """The fragment's compare-and-set succeeded: adopt its ensemble, re-queue what still needs
        sending, release held completions."""
        change = self.change
        if change is None:
            raise InvariantError("a fragment was written only if one was asked for")
        self.change = None
        if self.stopped is not None:
            return self.stopped  # stopped meanwhile (fenced, shut down): the fragment changes nothing here
        self.ensemble = change.ensemble
        return self._end_change(self._set_write_sets(), self._change_unreplaced)

    def on_fragment_conflict(self, state: str) -> WriteFragment | Stop:
        """The compare-and-set met a newer version; `state` is the ledger's state re-read
        (a LedgerState value). Retry on the new version while OPEN, bounded."""
        change = self.change
        if change is None:
            raise InvariantError("a conflict answers a fragment write")
        if self.stopped is not None:
            self.change = None
            return self.stopped
        if state != "OPEN":
            self.change = None
            return self.stop(StopKind.FENCED, f"the ledger is {state}: another client is recovering it")
        if self.cas_attempts >= self.cas_attempts_max:
            self.change = None
            return self.stop(StopKind.CONFLICT, "ensemble change kept conflicting")
        self.cas_attempts += 1
        return change

    def on_fragment_failed(self, message: str) -> Stop:
        """The fragment could not be written (the metadata store failed): the writer stops."""
        ensure(self.change is not None, "a failure answers a fragment write")
        self.change = None
        return self.stop(StopKind.FAILED, message)

    def _end_change(self, sets: tuple[tuple[str, ...], ...] | None, unreplaced: tuple[str, ...]) -> ChangeDone:
        self.dead |= set(unreplaced)
        completed, resend = self.adds.end_change(sets)
        self.outbox = resend
        adds = self.adds
        ensure(not adds.changing, "completions flow again after a change")
        ensure(all(p.stripes is not None or p.bookies == adds.write_set_for(p.entry_id) for p in resend),
               "every unacknowledged run has its ids' write sets in the current ensemble")
        return ChangeDone(completed, unreplaced)

    def _set_write_sets(self) -> tuple[tuple[str, ...], ...]:
        """The E distinct write sets of the current ensemble (entry e uses set e mod E), and
        their sorted forms, which `sends` uses to group entries."""
        sets = write_sets(self.ensemble, self.write_quorum_size)
        # Per write set: its bookies sorted, and a single add's `sent` once sent to all of them.
        self._sorted_sets = {ws: (tuple(sorted(ws)), dict.fromkeys(ws, 1)) for ws in sets}
        return sets

    # ---- explicit LAC ---------------------------------------------------------------------------

    def lac_due(self, now_s: float, interval_s: float) -> bool:
        """Adds stopped `interval_s` ago and the LAC moved past the last one sent: tailing readers
        would not see the last entries until the next write."""
        return (self.adds.lac > self.last_lac_sent and not self.outbox
                and now_s - self.last_add_s >= interval_s)

    def explicit_lac(self) -> tuple[int, tuple[str, ...]]:
        """Send the LAC now: the value and the bookies to tell (failed ones would only stall)."""
        lac = self.adds.lac
        self.last_lac_sent = lac
        return lac, tuple(b for b in self.ensemble if b not in self.dead and b not in self.failed)

    # ---- closing and stopping -------------------------------------------------------------------

    def begin_close(self) -> None:
        ensure(self.phase is Phase.WRITING, "a ledger is closed once")
        self.phase = Phase.CLOSING
        self.seal_attempts = 1

    def close_command(self, state: str, closed_at: int | None) -> Seal | Sealed | Stop:
        """Close at the LAC, given the metadata as read (`state` a LedgerState value, `closed_at`
        its last entry when CLOSED). Outstanding adds must be settled (or abandoned) first."""
        ensure(self.phase is Phase.CLOSING, "close_command follows begin_close")
        ensure(not self.adds.entries, "a ledger is sealed with no add in flight")
        if self.stopped is not None and self.stopped.kind is StopKind.FENCED:
            return self.stopped
        lac, length = self.adds.lac, self.adds.length
        verdict = writer_close_verdict(state, closed_at, lac)
        if verdict is CloseVerdict.DONE:
            self.phase = Phase.CLOSED
            return Sealed(lac, length)  # somebody closed it exactly where this writer would have
        if verdict is CloseVerdict.FENCED:
            if state == "IN_RECOVERY":
                return self.stop(StopKind.FENCED, "being recovered by another client; close refused")
            return self.stop(StopKind.FENCED, f"closed by another client at entry {closed_at}, "
                                              f"but this writer had acknowledged up to {lac}")
        return Seal(lac, length)

    def on_sealed(self) -> Sealed:
        ensure(self.phase is Phase.CLOSING, "a seal answers close_command")
        self.phase = Phase.CLOSED
        return Sealed(self.adds.lac, self.adds.length)

    def on_seal_conflict(self, state: str, closed_at: int | None) -> Seal | Sealed | Stop:
        """The close met a newer version: decide again on the metadata re-read, bounded."""
        if self.seal_attempts >= self.cas_attempts_max:
            return self.stop(StopKind.CONFLICT, "close kept conflicting")
        self.seal_attempts += 1
        return self.close_command(state, closed_at)

    def abandon(self) -> list[PendingAdd]:
        """Every entry in flight fails (closing with adds stuck, or stopping)."""
        self.outbox = []
        return self.adds.fail_all()

    def stop(self, kind: StopKind, message: str) -> Stop:
        """Stop for good (the first reason stands): every entry in flight fails, none will ever
        complete, later adds are refused."""
        if self.stopped is None:
            self.stopped = Stop(kind, message, self.abandon())
            ensure(not self.adds.entries and not self.outbox, "a stopped writer holds no adds")
        return self.stopped

