"""Run-encoded adds in the simulator (issue 30 item 2): which seeds use them, and the bookie's
side of a run request.

Half the seeds (drawn from the seed alone, `uses_runs`, so every other seed keeps its history
and the regression seeds replay theirs with runs=False) have their writers append runs of 1..4
entries through the machine's `append` (one record per run), and send each bookie one request
per segment the machine's `sends` makes (with E > W a bookie's segments are not consecutive). A
bookie answers a run once, with (status, stored): the entries before `stored` are durable, the rest failed; with a
small probability it refuses a run from one of its entries on (REFUSED, as TOO_LARGE on a real
bookie), which must fail that entry and every later one while the LAC never passes it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from functools import partial

from pyspark_ledger.testing.sim.bookie import FENCED, OK, SimBookie, SimEntry

REFUSED = "REFUSED"
RUN_LEN_MAX = 4
REFUSE_P = 0.03  # a run refused from one of its entries on

RunRespond = Callable[[tuple[str, int]], None]


def uses_runs(seed: int) -> bool:
    return random.Random(f"runs-{seed}").random() < 0.5


def add_run(bookie: SimBookie, entries: Sequence[SimEntry], respond: RunRespond) -> None:
    """Store `entries` (one run request) and answer once (status, stored) when the prefix it
    keeps is durable (a bookie that is down or crashes meanwhile never answers)."""
    if not bookie.up:
        return
    cut = len(entries)
    if bookie.world.rng.random() < REFUSE_P:
        cut = bookie.world.rng.randrange(len(entries))
        bookie.world.faults["run_refused"] += 1
    if cut == 0:
        respond((REFUSED, 0))
        return
    answers: list[str | None] = [None] * cut

    def on_entry(i: int, status: str) -> None:
        if answers[i] is not None:
            return
        answers[i] = status
        if all(a is not None for a in answers):
            stored = next((j for j, a in enumerate(answers) if a != OK), cut)
            if stored < cut:
                failed = answers[stored]
                respond((FENCED if FENCED in answers else str(failed), 0 if FENCED in answers else stored))
            else:
                respond((OK if cut == len(entries) else REFUSED, cut))

    for i, entry in enumerate(entries[:cut]):
        bookie.add(entry, False, partial(on_entry, i))
