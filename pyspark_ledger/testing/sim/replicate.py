"""Recovery adds: every recovered copy to its write set, in batches bounded by byte_bounded_chunks.

A bookie counts for an entry only if its whole batch was acknowledged (after its journal sync);
a failed or timed-out batch names its bookie as failed."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from pyspark_ledger.protocol.distribution import byte_bounded_chunks
from pyspark_ledger.testing.sim.actor import Actor
from pyspark_ledger.testing.sim.bookie import OK, SimBookie, SimEntry

REPLICATE_BATCH_ENTRIES_MAX = 4
REPLICATE_BATCH_BYTES_MAX = 6000
REPLICATE_TIMEOUT_S = 0.3


def replicate(actor: Actor, ledger: int, copies: Sequence[tuple[SimEntry, tuple[str, ...]]],
              then: Callable[[dict[int, int], set[str]], None]) -> None:
    """Send each (copy, write set) to its write set; `then(acks per entry, failed bookies)` once
    every batch was answered or timed out."""
    per_bookie: dict[str, list[SimEntry]] = {}
    for copy, members in copies:
        for b in members:
            per_bookie.setdefault(b, []).append(copy)
    batches = [(b, chunk) for b in sorted(per_bookie)
               for chunk in byte_bounded_chunks(per_bookie[b], lambda c: c.size,
                                                REPLICATE_BATCH_ENTRIES_MAX, REPLICATE_BATCH_BYTES_MAX)]
    acks: dict[int, int] = {}
    failed: set[str] = set()
    outstanding = [len(batches)]
    if not batches:
        then(acks, failed)
        return

    def answered(b: str, batch: list[SimEntry], ok: bool) -> None:
        if ok:
            for c in batch:
                acks[c.entry_id] = acks.get(c.entry_id, 0) + 1
        else:
            failed.add(b)
        outstanding[0] -= 1
        if outstanding[0] == 0:
            then(acks, failed)

    for b, batch in batches:
        def request(bookie: SimBookie, respond: Callable[[bool], None], batch: list[SimEntry] = batch) -> None:
            statuses: list[str] = []

            def one(status: str) -> None:
                statuses.append(status)
                if len(statuses) == len(batch):
                    respond(all(s == OK for s in statuses))

            for c in batch:
                bookie.add(c, True, one)

        actor.call_bookie(b, request, functools.partial(answered, b, batch),
                          functools.partial(answered, b, batch, False), REPLICATE_TIMEOUT_S,
                          f"recovery add {ledger} x{len(batch)}")
