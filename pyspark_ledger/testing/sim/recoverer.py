"""A recovery ("Closing a ledger as a reader") driving the real protocol room: fencing to
covers_every_write_set, recovery_start, the RecoveryReader machine (windows, merged answers,
short answers as progress, stalls), recovery adds in byte_bounded_chunks, a replacement kept in the
recovery's own view (recovery_fragments) and written only with the close at recovery_close_point
after recovery_close_verdict (or adopting another's close).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import cast

from pyspark_ledger.protocol.close_rules import (
    RecoveryCloseVerdict,
    first_changed_entry,
    recovery_close_point,
    recovery_close_verdict,
)
from pyspark_ledger.protocol.distribution import covers_every_write_set
from pyspark_ledger.protocol.ensemble_change import recovery_fragments
from pyspark_ledger.protocol.invariants import ensure
from pyspark_ledger.protocol.recovery_plan import Answer, recovery_start
from pyspark_ledger.protocol.recovery_reader import Done, Fail, Read, ReaderCommand, RecoveryReader, RetryAfter
from pyspark_ledger.testing.sim.actor import Actor, Cluster
from pyspark_ledger.testing.sim.bookie import CORRUPT, PRESENT, SimBookie, SimEntry
from pyspark_ledger.testing.sim.metastore import CLOSED, IN_RECOVERY, BadVersion, Fragment, LedgerMeta
from pyspark_ledger.testing.sim.payload import length_through
from pyspark_ledger.testing.sim.replicate import replicate

FENCE_ROUNDS_MAX = 5
RPC_TIMEOUT_S = 0.25
RETRY_DELAY_S = 0.1
CAS_ATTEMPTS_MAX = 20
ENSEMBLE_CHANGES_MAX = 3
REREADS_MAX = 3

OnEnd = Callable[["SimRecovery", "str | None"], None]


def answers_of(reply: Sequence[tuple[int, str, SimEntry | None]]) -> dict[int, tuple[Answer, SimEntry | None]]:
    """A bookie's read reply as answers: a corrupt copy (digest mismatch) is UNKNOWN, never ABSENT."""
    out: dict[int, tuple[Answer, SimEntry | None]] = {}
    for eid, status, copy in reply:
        if status == PRESENT:
            out[eid] = (Answer.PRESENT, copy)
        elif status == CORRUPT:
            out[eid] = (Answer.UNKNOWN, None)
        else:
            out[eid] = (Answer.ABSENT, None)
    return out


def _pairs(meta: LedgerMeta) -> list[tuple[int, tuple[str, ...]]]:
    return [(f.first_entry_id, f.ensemble) for f in meta.fragments]


def _ends_after(meta: LedgerMeta, fragment: Fragment, entry_id: int) -> bool:
    later = [f.first_entry_id for f in meta.fragments if f.first_entry_id > fragment.first_entry_id]
    return not later or min(later) > entry_id


class SimRecovery(Actor):
    def __init__(self, cluster: Cluster, name: str, ledger: int, on_end: OnEnd):
        super().__init__(cluster, name)
        self.ledger = ledger
        self.on_end = on_end
        self.meta: LedgerMeta | None = None
        self.version = 0
        self.done = False
        self.result: tuple[int, int] | None = None
        self.rereads = 0
        self.view: LedgerMeta = None  # type: ignore[assignment]  # fragments read + own replacement
        self.replaced: dict[str, str] = {}  # failed bookie -> its replacement in the view

    def start(self) -> None:
        active = self.cluster.recovering.setdefault(self.ledger, [])
        self.world.stats["recoveries"] += 1
        if active:
            self.world.stats["recoveries_concurrent"] += 1
        active.append(self.name)
        def then(result: object) -> None:
            self.meta, self.version = cast("tuple[LedgerMeta, int]", result)  # the store's (meta, version)
            self._mark_in_recovery(CAS_ATTEMPTS_MAX)

        self.meta_call(lambda: self.cluster.store.read(self.ledger), then, f"read {self.ledger}")

    def _finish(self, error: str | None) -> None:
        if not self.done:
            self.done = True
            self.cluster.recovering[self.ledger].remove(self.name)
            self.world.stats["recoveries_failed" if error else "recoveries_closed"] += 1
            self.world.note(f"{self.name} recovery of {self.ledger} ends: {error or self.result}")
            self.on_end(self, error)

    # ---- 1. IN_RECOVERY, 2. fencing ------------------------------------------------------------

    def _mark_in_recovery(self, attempts: int) -> None:
        """CAS OPEN -> IN_RECOVERY on the version read (IN_RECOVERY already: take it over)."""
        assert self.meta is not None
        store, meta, version = self.cluster.store, self.meta, self.version
        if meta.state == CLOSED:
            self._adopt(meta)
            return
        if meta.state == IN_RECOVERY:
            self._fence_round(0, {})
            return

        def then(result: object) -> None:
            if isinstance(result, BadVersion):
                if attempts <= 1:
                    self._finish(f"ledger {self.ledger}: marking IN_RECOVERY kept conflicting")
                    return
                self.meta, self.version = store.read(self.ledger)
                self._mark_in_recovery(attempts - 1)
                return
            self.meta, self.version = meta.start_recovery(), cast(int, result)  # a CAS answers the new version
            self._fence_round(0, {})

        self.meta_call(lambda: store.cas(meta.start_recovery(), version), then, f"mark {self.ledger} IN_RECOVERY")

    def _fence_round(self, round_: int, answered: dict[str, int]) -> None:
        assert self.meta is not None
        seg = self.meta.fragments[-1]
        todo = [b for b in seg.ensemble if b not in answered]
        waiting = set(todo)

        def arrived(b: str, lac: int | None) -> None:
            waiting.discard(b)
            if lac is not None:
                answered[b] = lac
            if not waiting:
                self._fence_round_done(round_, answered)

        for b in todo:
            def request(bookie: SimBookie, respond: Callable[[int | None], None]) -> None:
                lac = bookie.fence(self.ledger)
                if lac is not None:
                    respond(lac)
            self.call_bookie(b, request, functools.partial(arrived, b), functools.partial(arrived, b, None),
                             RPC_TIMEOUT_S, f"fence {self.ledger}")

    def _fence_round_done(self, round_: int, answered: dict[str, int]) -> None:
        assert self.meta is not None
        seg, meta = self.meta.fragments[-1], self.meta
        if covers_every_write_set(seg.ensemble, meta.write_quorum_size, meta.ack_quorum_size, answered):
            start = recovery_start(answered, seg.first_entry_id)
            self.world.note(f"{self.name} fenced {self.ledger} lacs={sorted(answered.items())} start={start}")
            self._read_forward(start)
        elif round_ + 1 >= FENCE_ROUNDS_MAX:
            self._finish(f"ledger {self.ledger}: could not fence W-A+1 bookies of every write set of "
                         f"{list(seg.ensemble)} (answered: {sorted(answered)})")
        else:
            self.later(RETRY_DELAY_S * (round_ + 1), lambda: self._fence_round(round_ + 1, answered), "fence retry")

    # ---- 3. reading forward (the pure machine decides) -----------------------------------------

    def _read_forward(self, start: int) -> None:
        assert self.meta is not None
        meta = self.meta
        self.view, self.replaced = meta, {}
        # Every bookie that may hold an entry from `start` on (more than the last fragment's when
        # a changed fragment is read again).
        ensemble = tuple(sorted({b for f in meta.fragments for b in f.ensemble
                                 if f is meta.fragments[-1] or _ends_after(meta, f, start)}))
        reader: RecoveryReader[SimEntry] = RecoveryReader(
            start, meta.write_set, bookies=ensemble, write_quorum_size=meta.write_quorum_size,
            ack_quorum_size=meta.ack_quorum_size, entries_max=self.cluster.read_entries_max,
            bytes_max=self.cluster.read_bytes_max)
        self._run(reader, reader.first_command(), start)

    def _run(self, reader: RecoveryReader[SimEntry], cmd: ReaderCommand, start: int) -> None:
        if isinstance(cmd, Fail):
            self._finish(f"ledger {self.ledger}: {cmd.message}")
        elif isinstance(cmd, Done):
            found: list[SimEntry] = cmd.found
            for copy in found:
                self.cluster.checker.check_copy(self.name, copy)
            last = recovery_close_point(found[-1].entry_id if found else None, start)
            ensure(last == cmd.last_entry, "the reader's end and recovery_close_point agree")
            self._replicate(start, found, last, ENSEMBLE_CHANGES_MAX)
        elif isinstance(cmd, RetryAfter):
            self.later(RETRY_DELAY_S * cmd.stalled, lambda: self._read_round(reader, cmd, start), "read retry")
        else:
            self._read_round(reader, cmd, start)

    def _read_round(self, reader: RecoveryReader[SimEntry], cmd: Read | RetryAfter, start: int) -> None:
        window = cmd.window
        waiting = set(cmd.bookies)

        def arrived(b: str, reply: object) -> None:
            waiting.discard(b)
            if reply is not None:
                answers = answers_of(cast("list[tuple[int, str, SimEntry | None]]", reply))  # a bookie read's rows
                if len(answers) < window.last - window.first + 1 and answers[max(answers)][0] is not Answer.ABSENT:
                    self.world.stats["recovery_short_answers"] += 1
                reader.on_answers(b, answers)
            if not waiting:
                self._run(reader, reader.end_round(), start)

        for b in cmd.bookies:
            def request(bookie: SimBookie, respond: Callable[[object], None]) -> None:
                reply = bookie.read(self.ledger, window.first, window.last, window.max_bytes, fence=True)
                if reply is not None:
                    respond(reply)
            self.call_bookie(b, request, functools.partial(arrived, b), functools.partial(arrived, b, None),
                             RPC_TIMEOUT_S, f"read {self.ledger}/{window.first}-{window.last}")

    # ---- 4. re-replication, 5. close -----------------------------------------------------------

    def _replicate(self, start: int, found: list[SimEntry], last: int, changes_left: int,
                   close_attempts: int = CAS_ATTEMPTS_MAX) -> None:
        """Copy every found entry to its write set in this recovery's view (the fragments read,
        plus its own replacement, which is written only with the close)."""
        view = self.view

        def then(acks: dict[int, int], failed: set[str]) -> None:
            if all(acks.get(c.entry_id, 0) >= view.ack_quorum_size for c in found):
                self._close(start, found, last, close_attempts, changes_left)
            elif changes_left <= 0:
                self._finish(f"ledger {self.ledger}: recovered entries could not reach A={view.ack_quorum_size} bookies")
            else:
                self._replace(start, found, last, failed or set(view.fragments[-1].ensemble), changes_left - 1)

        copies = [(c, view.write_set(c.entry_id)) for c in found]
        replicate(self, self.ledger, copies, then)

    def _replace(self, start: int, found: list[SimEntry], last: int, failed: set[str], changes_left: int) -> None:
        """Replace failed bookies of the last fragment from `start` on, in this recovery's view
        only: the metadata names the newcomers only once they hold the entries (the close CAS).
        Recorded earlier, a newcomer's "no such entry" could make the next recovery truncate
        an acknowledged entry (seed 44973)."""
        current = self.view.fragments[-1].ensemble
        candidates = [b for b in self.cluster.writable_bookies() if b not in current and b not in failed]
        self.world.rng.shuffle(candidates)
        for b in sorted(failed):
            if b in current and candidates:
                self.replaced[b] = candidates.pop()
        assert self.meta is not None
        fragments = recovery_fragments(_pairs(self.meta), self.replaced, start)
        self.view = replace(self.meta, fragments=tuple(Fragment(first, ens) for first, ens in fragments))
        self.world.note(f"{self.name} replaces {sorted(self.replaced.items())} in its view of {self.ledger}")
        self.later(RETRY_DELAY_S, lambda: self._replicate(start, found, last, changes_left), "replicate again")

    def _close(self, start: int, found: list[SimEntry], last: int, attempts: int, changes_left: int) -> None:
        """Read, decide (recovery_close_verdict), then CAS the close on the version read; a
        conflict reads again, changed fragments call for the copies again (both bounded)."""
        length = length_through(self.ledger, last)  # what entry `last`'s header says
        store = self.cluster.store

        def closed(result: object, new: LedgerMeta) -> None:
            if not isinstance(result, BadVersion):
                self._adopt(new)
            elif attempts <= 1:
                self._finish(f"ledger {self.ledger}: closing after recovery kept conflicting")
            else:
                self._close(start, found, last, attempts - 1, changes_left)

        def read(result: object) -> None:
            assert self.meta is not None
            meta, version = cast("tuple[LedgerMeta, int]", result)  # the store's (meta, version)
            verdict = recovery_close_verdict(meta.state, _pairs(meta), _pairs(self.meta))
            if verdict is RecoveryCloseVerdict.ADOPT:
                self._adopt(meta)
            elif verdict is RecoveryCloseVerdict.REPLICATE_AGAIN:
                self._read_again(start, meta, version)
            else:
                # The fragments are those read: write this recovery's replacement with the close.
                new = replace(meta, fragments=self.view.fragments).close(last, length)
                self.meta_call(lambda: store.cas(new, version), lambda r: closed(r, new), f"close {self.ledger}@{last}")

        self.meta_call(lambda: store.read(self.ledger), read, f"read {self.ledger} to close")

    def _read_again(self, start: int, meta: LedgerMeta, version: int) -> None:
        """The fragments changed under this recovery (a concurrent one replaced a bookie): read
        again from where they part, on the fragments as they are now, then replicate there."""
        assert self.meta is not None
        changed = first_changed_entry(_pairs(meta), _pairs(self.meta))
        new_start = start if changed is None else min(start, max(changed, 0))
        self.world.note(f"{self.name}: fragments of {self.ledger} changed from {changed}; reading again from {new_start}")
        self.meta, self.version = meta, version
        self.view, self.replaced = meta, {}
        self.rereads += 1
        self.world.stats["recovery_rereads"] += 1
        if self.rereads > REREADS_MAX:
            self._finish(f"ledger {self.ledger}: fragments kept changing under the recovery")
        else:
            self._read_forward(new_start)

    def _adopt(self, meta: LedgerMeta) -> None:
        """The ledger is CLOSED (by this recovery or another): that end is the recovery's result."""
        self.result = (meta.last_entry, meta.length)
        self.cluster.checker.on_recovered(self.name, self.ledger, meta.last_entry, meta.length)
        self._finish(None)
