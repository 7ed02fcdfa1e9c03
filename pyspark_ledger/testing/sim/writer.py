"""A ledger writer driving the real PendingAdds, plan_ensemble_change and writer_close_verdict.

It adds `entries_total` entries at a steady pace with a bounded number in flight, replaces a
bookie that fails an add (timeout, fsync error, read-only) by recording a new fragment with a
metadata CAS, and closes at its LAC. A FENCED answer, a ledger that left OPEN under its CAS, or
an ensemble change with no way to reach the ack quorum stops it with a clear error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

from pyspark_ledger.protocol.close_rules import CloseVerdict, writer_close_verdict
from pyspark_ledger.protocol.distribution import write_sets
from pyspark_ledger.protocol.ensemble_change import EnsembleChangePlan, plan_ensemble_change
from pyspark_ledger.protocol.pending_adds import PendingAdd, PendingAdds
from pyspark_ledger.testing.sim.actor import Actor, Cluster
from pyspark_ledger.testing.sim.bookie import FENCED, OK, SimBookie, SimEntry
from pyspark_ledger.testing.sim.metastore import OPEN, BadVersion, LedgerMeta
from pyspark_ledger.testing.sim.payload import size_of, token_of

ADD_TIMEOUT_S = 0.25
ADD_GAP_S = 0.1  # pace of new entries (a ledger spans the fault window)
IN_FLIGHT_MAX = 4
CAS_ATTEMPTS_MAX = 20


class SimWriter(Actor):
    def __init__(self, cluster: Cluster, name: str, meta: LedgerMeta, version: int, entries_total: int,
                 on_end: Callable[[SimWriter, str | None], None]):
        super().__init__(cluster, name)
        self.ledger = meta.ledger
        self.meta, self.version = meta, version
        self.w, self.a = meta.write_quorum_size, meta.ack_quorum_size
        self.ensemble = meta.fragments[-1].ensemble
        self.fragments = meta.fragments
        self.pending = PendingAdds(self.a, write_sets(self.ensemble, self.w))
        self.entries_total = entries_total
        self.issued = 0
        self.dead: set[str] = set()
        self.failed: set[str] = set()  # bookies that failed an add since the last change began
        self.changing = False
        self.state = "writing"  # writing -> closing -> closed | failed
        self.error: str | None = None
        self.on_end = on_end

    @property
    def was_paused(self) -> bool:
        return self.paused_until_s > 0.0

    @property
    def live(self) -> bool:
        return self.state in ("writing", "closing")

    def start(self) -> None:
        self.later(0.0, self._issue, "issue")

    # ---- adds ----------------------------------------------------------------------------------

    def _issue(self) -> None:
        if self.state != "writing":
            return
        if self.issued >= self.entries_total:
            self._maybe_close()
            return
        if len(self.pending) < IN_FLIGHT_MAX:
            eid = self.pending.next_entry_id
            p = PendingAdd(eid, size_of(self.ledger, eid), self.pending.write_set_for(eid))
            self.pending.append(p)
            self.issued += 1
            for b in p.bookies:
                if b not in self.dead:
                    self._send(p, b)
        self.later(ADD_GAP_S, self._issue, "issue")

    def _send(self, p: PendingAdd, b: str) -> None:
        if b not in p.sent:
            p.sent.append(b)
        entry = SimEntry(self.ledger, p.entry_id, token_of(self.ledger, p.entry_id), p.size,
                         self.pending.length + sum(q.size for q in self.pending.entries if q.entry_id <= p.entry_id),
                         self.pending.lac)
        eid = p.entry_id

        def request(bookie: SimBookie, respond: Callable[[str], None]) -> None:
            bookie.add(entry, False, respond)

        self.call_bookie(b, request, lambda status: self._on_add_reply(b, eid, status),
                         lambda: self._on_add_failed(b, eid, "timeout"), ADD_TIMEOUT_S, f"add {self.ledger}/{eid}")

    def _on_add_reply(self, b: str, eid: int, status: str) -> None:
        if not self.live:
            return  # a stopped writer counts nothing
        if status == OK:
            self._completed(self.pending.on_acks(b, [eid]))
        elif status == FENCED:
            self._stop(f"ledger {self.ledger} is fenced (bookie {b} refused entry {eid})")
        else:
            self._on_add_failed(b, eid, status)

    def _on_add_failed(self, b: str, eid: int, why: str) -> None:
        if not self.live or eid not in self.pending.by_id or b not in self.pending.by_id[eid].bookies:
            return  # done already, or the bookie left the entry's write set: nothing to replace
        self.world.note(f"{self.name} add {self.ledger}/{eid} failed on {b}: {why}")
        self.pending.on_send_failed(b, [eid])
        self.failed.add(b)
        if not self.changing:
            self._begin_change()

    def _completed(self, done: Sequence[PendingAdd]) -> None:
        if done:
            self.world.stats["entries_acked"] += len(done)
            if self.was_paused:
                self.world.stats["zombie_late_acks"] += len(done)
            self.cluster.checker.on_completed(self.name, self.ledger, self.pending.lac, [p.entry_id for p in done])
        if self.state == "writing" and self.issued >= self.entries_total:
            self._maybe_close()

    # ---- ensemble changes ----------------------------------------------------------------------

    def _begin_change(self) -> None:
        self.changing = True
        first = self.pending.begin_change()
        failed, self.failed = self.failed, set()
        rng = self.world.rng

        def pick(ensemble: Sequence[str], candidates: Sequence[str], failed: str) -> str | None:
            if self.cluster.placement is not None:
                return self.cluster.placement.replacement(ensemble, candidates, failed, self.w)
            return rng.choice(list(candidates)) if candidates else None

        plan = plan_ensemble_change(self.ensemble, failed, self.dead, self.cluster.writable_bookies(), pick,
                                    write_quorum_size=self.w, ack_quorum_size=self.a, first_entry_id=first)
        if plan.error is not None:
            self._stop(plan.error)
            return
        if not plan.needs_metadata_change:
            self.dead |= set(plan.unreplaced)
            self._end_change(None)
            return
        self.world.note(f"{self.name} ensemble change from {first}: {dict(plan.replaced)}")
        self.world.stats["ensemble_changes"] += 1
        self._record_fragment(plan, CAS_ATTEMPTS_MAX)

    def _record_fragment(self, plan: EnsembleChangePlan, attempts: int) -> None:
        def op() -> tuple[LedgerMeta, int]:
            meta, version = self.cluster.store.read(self.ledger)
            if meta.state != OPEN:
                return meta, -1
            new = meta.with_fragment(plan.first_entry_id, plan.ensemble)
            version = self.cluster.store.cas(new, self.version)
            self.cluster.checker.on_fragment_cas(self.ledger)
            return new, version

        def then(result: object) -> None:
            if not self.live:
                return
            if isinstance(result, BadVersion):
                self.meta, self.version = self.cluster.store.read(self.ledger)  # re-read, decide again
                if attempts <= 1:
                    self._stop(f"ledger {self.ledger}: ensemble change kept conflicting")
                else:
                    self._record_fragment(plan, attempts - 1)
                return
            meta, version = cast("tuple[LedgerMeta, int]", result)  # the store's (meta, version)
            if version < 0:
                self._stop(f"ledger {self.ledger} is {meta.state}: another client is recovering it")
                return
            self.meta, self.version = meta, version
            self.ensemble, self.fragments = plan.ensemble, meta.fragments
            self.dead |= set(plan.unreplaced)
            self.cluster.checker.on_writer_view(self.name, self.ledger, self.fragments, version)
            self._end_change(write_sets(self.ensemble, self.w))

        self.meta_call(op, then, f"fragment {self.ledger}@{plan.first_entry_id}")

    def _end_change(self, new_write_sets: Sequence[tuple[str, ...]] | None) -> None:
        completed, resend = self.pending.end_change(new_write_sets)
        self.changing = False
        self._completed(completed)
        if not self.live:
            return
        for p in resend:
            for b in p.bookies:
                if b not in p.sent and b not in self.dead and b not in p.acked:
                    self._send(p, b)
        if self.failed:
            self._begin_change()  # failures reported during the change

    # ---- closing -------------------------------------------------------------------------------

    def _maybe_close(self) -> None:
        if self.state != "writing" or len(self.pending) or self.changing:
            return
        self.state = "closing"
        self._close(CAS_ATTEMPTS_MAX)

    def _close(self, attempts: int) -> None:
        lac, length = self.pending.lac, self.pending.length

        def op() -> tuple[CloseVerdict, LedgerMeta, int]:
            meta, version = self.cluster.store.read(self.ledger)
            verdict = writer_close_verdict(meta.state, meta.last_entry if meta.state == "CLOSED" else None, lac)
            if verdict is not CloseVerdict.WRITE:
                return verdict, meta, version
            new = meta.close(lac, length)
            return verdict, new, self.cluster.store.cas(new, self.version)

        def then(result: object) -> None:
            if self.state != "closing":
                return
            if isinstance(result, BadVersion):
                self.meta, self.version = self.cluster.store.read(self.ledger)
                if attempts <= 1:
                    self._stop(f"ledger {self.ledger}: close kept conflicting")
                else:
                    self._close(attempts - 1)
                return
            verdict, meta, version = cast("tuple[CloseVerdict, LedgerMeta, int]", result)  # the close's answer
            if verdict is CloseVerdict.FENCED:
                self._stop(f"ledger {self.ledger} is {meta.state} (closed at {meta.last_entry}) by another "
                           f"client; this writer acknowledged up to {lac}")
                return
            self.meta, self.version = meta, version
            self.cluster.checker.on_writer_closed(self.name, self.ledger, lac, length)
            self.state = "closed"
            self.on_end(self, None)

        self.meta_call(op, then, f"close {self.ledger}@{lac}")

    def stop_for(self, error: str) -> None:
        self._stop(error)

    def _stop(self, error: str) -> None:
        """Stop for good: every entry in flight fails, none will ever be counted."""
        if not self.live:
            return
        self.world.note(f"{self.name} stops: {error}")
        self.world.stats["writers_fenced" if "fenced" in error or "recover" in error else "writers_stopped"] += 1
        self.state, self.error = "failed", error
        self.pending.fail_all()
        self.on_end(self, error)
