"""A tailing reader of the log: reads every ledger in order, an open one only up to its LAC (from
W-A+1 bookies of every write set: covers_every_write_set), a closed one up to its last entry."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

from pyspark_ledger.protocol.distribution import covers_every_write_set
from pyspark_ledger.testing.sim.actor import Actor, Cluster
from pyspark_ledger.testing.sim.bookie import PRESENT, SimBookie, SimEntry
from pyspark_ledger.testing.sim.metastore import CLOSED, LedgerMeta

POLL_S = 0.25
RPC_TIMEOUT_S = 0.2
ENTRIES_PER_POLL_MAX = 8


def lac_of_answers(answers: Mapping[str, tuple[int, int]]) -> int:
    """The LAC a covering set of bookies vouches for: the highest LAC any of them reported."""
    return max(lac for lac, _ in answers.values())


class SimTailer(Actor):
    def __init__(self, cluster: Cluster, name: str, stop_s: float):
        super().__init__(cluster, name)
        self.stop_s = stop_s
        self.index = 0  # position in the log's ledger list
        self.next_entry = 0
        self.entries_read = 0

    def start(self) -> None:
        self.later(POLL_S, self._poll, "poll")

    def _poll(self) -> None:
        if self.world.now_s >= self.stop_s:
            self.world.note(f"{self.name} stops after {self.entries_read} entries")
            return
        record, _ = self.cluster.store.log
        if self.index >= len(record.ledgers):
            self.later(POLL_S, self._poll, "poll")
            return
        meta, _ = self.cluster.store.read(record.ledgers[self.index])
        if meta.state == CLOSED:
            if self.next_entry > meta.last_entry:
                self.index, self.next_entry = self.index + 1, 0
                self.later(0.0, self._poll, "next ledger")
            else:
                self._read_entries(meta, meta.last_entry)
            return
        self._read_lac(meta)

    def _read_lac(self, meta: LedgerMeta) -> None:
        ensemble = meta.fragments[-1].ensemble
        answers: dict[str, tuple[int, int]] = {}
        waiting = set(ensemble)

        def arrived(b: str, answer: tuple[int, int] | None) -> None:
            waiting.discard(b)
            if answer is not None:
                answers[b] = answer
            if waiting:
                return
            if answers and covers_every_write_set(ensemble, meta.write_quorum_size, meta.ack_quorum_size, answers):
                self._read_entries(meta, lac_of_answers(answers))
            else:
                self.later(POLL_S, self._poll, "poll (LAC not covered)")

        for b in ensemble:
            def request(bookie: SimBookie, respond: Callable[[tuple[int, int]], None]) -> None:
                answer = bookie.read_lac(meta.ledger)
                if answer is not None:
                    respond(answer)
            self.call_bookie(b, request, functools.partial(arrived, b), functools.partial(arrived, b, None),
                             RPC_TIMEOUT_S, f"read lac {meta.ledger}")

    def _read_entries(self, meta: LedgerMeta, through: int) -> None:
        """Read next_entry..through (at most ENTRIES_PER_POLL_MAX), one entry at a time, each from
        the first bookie of its write set that has an intact copy."""
        if self.next_entry > through or self.entries_read >= 10_000:
            self.later(POLL_S, self._poll, "poll")
            return
        eid = self.next_entry
        members = list(meta.write_set(eid))
        self.world.rng.shuffle(members)
        self._read_one(meta, through, eid, members, ENTRIES_PER_POLL_MAX)

    def _read_one(self, meta: LedgerMeta, through: int, eid: int, members: list[str], budget: int) -> None:
        if not members:
            self.later(POLL_S, self._poll, "poll (entry unreadable now)")
            return
        b, rest = members[0], members[1:]

        def arrived(reply: list[tuple[int, str, SimEntry | None]] | None) -> None:
            copy = reply[0][2] if reply and reply[0][1] == PRESENT else None
            if copy is None:
                self._read_one(meta, through, eid, rest, budget)
                return
            self.cluster.checker.on_read(self.name, copy)
            self.entries_read += 1
            self.world.stats["reader_entries"] += 1
            self.next_entry = eid + 1
            if budget > 1 and self.next_entry <= through:
                members_next = list(meta.write_set(self.next_entry))
                self.world.rng.shuffle(members_next)
                self._read_one(meta, through, self.next_entry, members_next, budget - 1)
            else:
                self.later(POLL_S if self.next_entry > through else 0.0, self._poll, "poll")

        def request(bookie: SimBookie, respond: Callable[[object], None]) -> None:
            reply = bookie.read(meta.ledger, eid, eid, 1, fence=False)
            if reply is not None:
                respond(reply)

        self.call_bookie(b, request, arrived, lambda: arrived(None), RPC_TIMEOUT_S, f"read {meta.ledger}/{eid}")
