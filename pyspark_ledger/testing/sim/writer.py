"""A ledger writer driving the product's writer machine (protocol.writer_machine) with simulated
bookie RPCs and metadata calls: every decision (where each entry goes, when it is acknowledged,
the ensemble change, the compare-and-set outcomes, the close) is the machine's, as in
ledger/write_handle.py; this actor only paces adds, sends, times out and calls the store.

It adds `entries_total` entries at a steady pace with a bounded number in flight; a failed add
(error answer, or no answer within ADD_TIMEOUT_S) goes to the machine, which calls for an
ensemble change; a FENCED answer, a ledger that left OPEN under its CAS, or a change with no way
to reach the ack quorum stops it with a clear error. It closes at its LAC.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from itertools import accumulate
from typing import cast

from pyspark_ledger.protocol.pending_adds import PendingAdd
from pyspark_ledger.protocol.writer_machine import (
    ChangeDone,
    Phase,
    Seal,
    Sealed,
    Stop,
    StopKind,
    WriteFragment,
    WriterCommand,
    WriterMachine,
)
from pyspark_ledger.testing.sim.actor import Actor, Cluster
from pyspark_ledger.testing.sim.bookie import FENCED, OK, SimBookie, SimEntry
from pyspark_ledger.testing.sim.metastore import CLOSED, BadVersion, LedgerMeta
from pyspark_ledger.testing.sim.payload import size_of, token_of
from pyspark_ledger.testing.sim.runs import RUN_LEN_MAX, add_run

ADD_TIMEOUT_S = 0.25
ADD_GAP_S = 0.1  # pace of new entries (a ledger spans the fault window)
IN_FLIGHT_MAX = 4


class SimPending(PendingAdd):
    """One entry or run in flight: the machine's record plus the ledger's length through each entry."""

    __slots__ = ("lengths",)

    def __init__(self, entry_id: int, sizes: list[int], lengths: list[int]):
        PendingAdd.__init__(self, entry_id, sum(sizes), sizes if len(sizes) > 1 else None)
        self.lengths = lengths


class SimWriter(Actor):
    def __init__(self, cluster: Cluster, name: str, meta: LedgerMeta, version: int, entries_total: int,
                 on_end: Callable[[SimWriter, str | None], None]):
        super().__init__(cluster, name)
        self.ledger = meta.ledger
        self.meta, self.version = meta, version
        self.fragments = meta.fragments
        self.machine = WriterMachine(meta.fragments[-1].ensemble, write_quorum_size=meta.write_quorum_size,
                                     ack_quorum_size=meta.ack_quorum_size)
        self.entries_total = entries_total
        self.issued = 0
        self.length_issued = 0
        self.reported_lac = -1  # the LAC last reported to the checker
        self.error: str | None = None
        self.on_end = on_end
        # Seeds with runs (runs.py) draw run lengths from their own generator: the world's
        # draws stay as they were, so a seed's faults and configuration do not move.
        self.run_rng = random.Random(f"{cluster.world.seed}-{name}") if cluster.world.runs else None

    @property
    def was_paused(self) -> bool:
        return self.paused_until_s > 0.0

    @property
    def live(self) -> bool:
        return self.machine.live

    def start(self) -> None:
        self.later(0.0, self._issue, "issue")

    # ---- adds ----------------------------------------------------------------------------------

    def _issue(self) -> None:
        m = self.machine
        if not m.live or m.phase is not Phase.WRITING:
            return
        if self.issued >= self.entries_total:
            self._maybe_close()
            return
        room = min(IN_FLIGHT_MAX - m.adds.pending_count, self.entries_total - self.issued)
        if room > 0:
            count = self.run_rng.randint(1, min(room, RUN_LEN_MAX)) if self.run_rng is not None else 1
            m.append(self._next_pending(count), m.lac, self.world.now_s)
            if self.run_rng is not None:
                self.world.stats["runs"] += 1
            self._flush()
        self.later(ADD_GAP_S, self._issue, "issue")

    def _next_pending(self, count: int) -> SimPending:
        """The next `count` new entries, as one record (a run when count > 1)."""
        first = self.machine.adds.next_entry_id
        sizes = [size_of(self.ledger, eid) for eid in range(first, first + count)]
        lengths = list(accumulate(sizes, initial=self.length_issued))[1:]
        self.length_issued = lengths[-1]
        self.issued += count
        return SimPending(first, sizes, lengths)

    def _flush(self) -> None:
        """Send what the machine's outbox holds, to the bookies it says each segment needs: entry
        by entry, or (seeds with runs) one run request per bookie per segment (a consecutive
        sub-run; with E > W a bookie's segments are not consecutive to each other)."""
        m = self.machine
        for targets, segments in m.sends(m.take_outbox()).items():
            for p, first, last in segments:
                run = cast(SimPending, p)
                if self.run_rng is not None:
                    for b in targets:
                        self._send_run(run, first, last, b)
                    continue
                for eid in range(first, last + 1):
                    for b in targets:
                        self._send(run, eid, b)

    def _send_run(self, run: SimPending, first: int, last: int, b: str) -> None:
        lac = self.machine.lac
        entries = [self._entry(run, eid, lac) for eid in range(first, last + 1)]
        ids = list(range(first, last + 1))

        def request(bookie: SimBookie, respond: Callable[[tuple[str, int]], None]) -> None:
            add_run(bookie, entries, respond)

        self.call_bookie(b, request, lambda answer: self._on_run_reply(b, ids, answer),
                         lambda: self._on_run_failed(b, ids, "timeout"), ADD_TIMEOUT_S,
                         f"add run {self.ledger}/{ids[0]}..{ids[-1]}")

    def _on_run_reply(self, b: str, ids: list[int], answer: tuple[str, int]) -> None:
        if not self.live:
            return
        status, stored = answer
        if stored:
            self._completed(self.machine.on_acks(b, ids[:stored]))
        if status == OK or not self.live:
            return
        if status == FENCED:
            self._apply(self.machine.on_fenced(b, status))
        else:
            self._on_run_failed(b, ids[stored:], status)

    def _on_run_failed(self, b: str, ids: list[int], why: str) -> None:
        if not self.live or not ids:
            return
        self.world.note(f"{self.name} add run {self.ledger}/{ids[0]}..{ids[-1]} failed on {b}: {why}")
        if self.machine.on_add_failed(b, ids):
            self._begin_change()

    def _entry(self, run: SimPending, eid: int, lac: int) -> SimEntry:
        i = eid - run.entry_id
        size = run.size if run.sizes is None else run.sizes[i]
        return SimEntry(self.ledger, eid, token_of(self.ledger, eid), size, run.lengths[i], lac)

    def _send(self, run: SimPending, eid: int, b: str) -> None:
        entry = self._entry(run, eid, self.machine.lac)

        def request(bookie: SimBookie, respond: Callable[[str], None]) -> None:
            bookie.add(entry, False, respond)

        self.call_bookie(b, request, lambda status: self._on_add_reply(b, eid, status),
                         lambda: self._on_add_failed(b, eid, "timeout"), ADD_TIMEOUT_S, f"add {self.ledger}/{eid}")

    def _on_add_reply(self, b: str, eid: int, status: str) -> None:
        if not self.live:
            return  # a stopped writer counts nothing
        if status == OK:
            self._completed(self.machine.on_acks(b, (eid,)))
        elif status == FENCED:
            self._apply(self.machine.on_fenced(b, status))
        else:
            self._on_add_failed(b, eid, status)

    def _on_add_failed(self, b: str, eid: int, why: str) -> None:
        if not self.live:
            return
        self.world.note(f"{self.name} add {self.ledger}/{eid} failed on {b}: {why}")
        if self.machine.on_add_failed(b, (eid,)):
            self._begin_change()

    def _completed(self, done: Sequence[PendingAdd]) -> None:
        """The machine's LAC moved (or may have): the entries past the last one reported
        completed, in order; `done` are the runs among them completed whole."""
        lac, before = self.machine.lac, self.reported_lac
        if done and (done[0].last <= before or done[-1].last > lac
                     or any(q.entry_id != p.last + 1 for p, q in zip(done, done[1:]))):
            self.cluster.checker.fail(f"{self.name}: runs completed {[(p.entry_id, p.last) for p in done]} do not "
                                      f"follow on from entry {before} up to the LAC {lac}")
        if lac > before:
            self.reported_lac = lac
            self.world.stats["entries_acked"] += lac - before
            if self.was_paused:
                self.world.stats["zombie_late_acks"] += lac - before
            self.cluster.checker.on_completed(self.name, self.ledger, lac, list(range(before + 1, lac + 1)))
        if self.issued >= self.entries_total:
            self._maybe_close()

    # ---- the machine's commands ----------------------------------------------------------------

    def _apply(self, cmd: WriterCommand) -> None:
        if isinstance(cmd, Stop):
            self._stopped(cmd)
        elif isinstance(cmd, ChangeDone):
            self._completed(cmd.completed)
            if not self.live:
                return
            self._flush()
            if self.machine.failed:
                self._begin_change()  # failures reported during the change
        elif isinstance(cmd, WriteFragment):
            self._record_fragment(cmd)
        elif isinstance(cmd, Seal):
            self._write_close(cmd)
        else:
            self._sealed(cmd)

    def _begin_change(self) -> None:
        rng = self.world.rng

        def pick(ensemble: Sequence[str], candidates: Sequence[str], failed: str) -> str | None:
            if self.cluster.placement is not None:
                return self.cluster.placement.replacement(ensemble, candidates, failed, self.machine.write_quorum_size)
            return rng.choice(list(candidates)) if candidates else None

        cmd = self.machine.begin_change(self.cluster.writable_bookies(), pick)
        if isinstance(cmd, WriteFragment):
            self.world.note(f"{self.name} ensemble change from {cmd.first_entry_id}: {dict(cmd.replaced)}")
            self.world.stats["ensemble_changes"] += 1
        self._apply(cmd)

    def _record_fragment(self, cmd: WriteFragment) -> None:
        def op() -> tuple[LedgerMeta, int]:
            new = self.meta.with_fragment(cmd.first_entry_id, cmd.ensemble)
            version = self.cluster.store.cas(new, self.version)
            self.cluster.checker.on_fragment_cas(self.ledger)
            return new, version

        def then(result: object) -> None:
            if isinstance(result, BadVersion):
                self.meta, self.version = self.cluster.store.read(self.ledger)  # re-read, let the machine decide
                self._apply(self.machine.on_fragment_conflict(self.meta.state))
                return
            self.meta, self.version = cast("tuple[LedgerMeta, int]", result)  # the store's (meta, version)
            done = self.machine.on_fragment_written()
            if isinstance(done, ChangeDone):
                self.fragments = self.meta.fragments
                self.cluster.checker.on_writer_view(self.name, self.ledger, self.fragments, self.version)
            self._apply(done)

        self.meta_call(op, then, f"fragment {self.ledger}@{cmd.first_entry_id}")

    # ---- closing -------------------------------------------------------------------------------

    def _maybe_close(self) -> None:
        m = self.machine
        if m.phase is not Phase.WRITING or not m.live or len(m.adds) or m.change is not None or m.failed:
            return
        m.begin_close()
        self._apply(m.close_command(self.meta.state, self.meta.last_entry if self.meta.state == CLOSED else None))

    def _write_close(self, cmd: Seal) -> None:
        def op() -> tuple[LedgerMeta, int]:
            new = self.meta.close(cmd.last_entry_id, cmd.length)
            return new, self.cluster.store.cas(new, self.version)

        def then(result: object) -> None:
            if not self.live:
                return
            if isinstance(result, BadVersion):
                self.meta, self.version = self.cluster.store.read(self.ledger)
                closed_at = self.meta.last_entry if self.meta.state == CLOSED else None
                self._apply(self.machine.on_seal_conflict(self.meta.state, closed_at))
                return
            self.meta, self.version = cast("tuple[LedgerMeta, int]", result)  # the close's answer
            self._apply(self.machine.on_sealed())

        self.meta_call(op, then, f"close {self.ledger}@{cmd.last_entry_id}")

    def _sealed(self, cmd: Sealed) -> None:
        self.cluster.checker.on_writer_closed(self.name, self.ledger, cmd.last_entry_id, cmd.length)
        self.on_end(self, None)

    def stop_for(self, error: str) -> None:
        if self.live:
            self._apply(self.machine.stop(StopKind.FAILED, error))

    def _stopped(self, stop: Stop) -> None:
        """Stopped for good: every entry in flight failed, none will ever be counted."""
        if self.error is not None:
            return  # told once
        self.error = f"ledger {self.ledger}: {stop.message}"
        self.world.note(f"{self.name} stops: {self.error}")
        self.world.stats["writers_fenced" if stop.kind is StopKind.FENCED else "writers_stopped"] += 1
        self.on_end(self, self.error)
