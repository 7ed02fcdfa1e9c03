"""Retention and offload never race (issue 34): 1,000 seeded interleavings of appends, retention
trims, offload attempts advancing step by step, crashes and queue passes, over a model of the
metadata (ledger records, the file queue) and the object store. The model takes each step exactly
as offload_ledger.py and queue_pass.py do, in the same order, and decides with the product's pure
rules (choice.choose, queue_verdict.verdict). At the end (time past the stale bound, two quiet
passes): 0 orphan objects, no ledger offloaded twice, a trimmed ledger's objects deleted, and at
every step no OFFLOADED record names a missing object.

LEDGER_OFFLOAD_SEEDS sets how many seeds (default 1,000); LEDGER_TEST_SEED replays one."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field

import pytest

from metadata.ids import LedgerId
from metadata.offload_queue import QueuedAttempt
from metadata.offload_record import OFFLOADED, WRITING, OffloadedFile, OffloadRecord
from metadata.offload_settings import OffloadSettings
from pyspark_ledger.offload.choice import LedgerView, choose
from pyspark_ledger.offload.queue_verdict import Verdict, verdict

STALE_MS = 1_000
SEEDS = int(os.environ.get("LEDGER_OFFLOAD_SEEDS", "1000"))
STEPS = ("queued", "announced", "written", "recorded")


@dataclass
class Attempt:
    lid: int
    name: str
    aid: str
    started: int
    done: str = ""  # the last step taken


@dataclass
class Model:
    rnd: random.Random
    now: int = 0
    ledgers: dict[int, OffloadRecord | None] = field(default_factory=dict)  # live ledgers' records
    sealed_at: dict[int, int] = field(default_factory=dict)
    trimmed: set[int] = field(default_factory=set)
    queue: dict[str, QueuedAttempt] = field(default_factory=dict)
    objects: set[str] = field(default_factory=set)
    running: list[Attempt] = field(default_factory=list)
    offloads: dict[int, int] = field(default_factory=dict)  # ledger -> times recorded OFFLOADED
    trimmed_names: set[str] = field(default_factory=set)
    next_id: int = 0
    crash_chance: float = 0.05  # of a queue pass crashing before an entry's objects go
    # Planted bugs (the test shows the checker catches each)
    bug_no_queue: bool = False
    bug_delete_live: bool = False

    def append(self) -> None:
        self.ledgers[self.next_id] = None
        self.sealed_at[self.next_id] = self.now
        self.next_id += 1

    def trim(self) -> None:
        if self.ledgers:
            lid = min(self.ledgers)
            rec = self.ledgers.pop(lid)
            self.trimmed.add(lid)
            if rec is not None and rec.offloaded:
                self.trimmed_names.update(f.name for f in rec.files)

    def start_offloads(self) -> None:
        views = [LedgerView(lid, True, self.sealed_at[lid], 100, rec is not None and rec.offloaded)
                 for lid, rec in sorted(self.ledgers.items())]
        for lid in choose(views, OffloadSettings(after_ms=self.rnd.choice([0, 50, 200])), self.now, limit=3):
            aid = f"{self.rnd.getrandbits(64):016x}"
            self.running.append(Attempt(lid, f"log/c0/{lid:020d}-{aid}.parquet", aid, self.now))

    def advance(self, a: Attempt) -> bool:
        """Take the attempt's next step (offload_ledger.py's order); False when it ends."""
        if a.lid not in self.ledgers:
            return False  # reading the ledger fails: the attempt ends (its queue entry stays)
        rec = self.ledgers[a.lid]
        if a.done == "":
            if rec is not None and (rec.offloaded or (rec.state == WRITING and self.now - rec.started_ms < STALE_MS)):
                return False  # _check_offloadable: offloaded or in progress elsewhere
            if not self.bug_no_queue:
                self.queue[a.aid] = QueuedAttempt(a.aid, LedgerId(0, a.lid), "file:///s", (a.name,), a.started)
            a.done = "queued"
        elif a.done == "queued":
            if self.now - a.started >= STALE_MS // 2:
                return False  # too slow to announce
            if rec is not None and (rec.offloaded or (rec.state == WRITING and self.now - rec.started_ms < STALE_MS)):
                return False
            self.ledgers[a.lid] = OffloadRecord(WRITING, a.aid, "file:///s", a.started, (OffloadedFile(a.name),))
            a.done = "announced"
        elif a.done == "announced":
            if a.aid not in self.queue and not self.bug_no_queue:
                return False  # given up by a queue pass
            self.objects.add(a.name)
            a.done = "written"
        elif a.done == "written":
            if rec is None or rec.attempt != a.aid or rec.state != WRITING:
                self.objects.discard(a.name)  # lost: it deletes its own object
                return False
            self.ledgers[a.lid] = rec.finished((OffloadedFile(a.name, 1),), self.now, None)
            self.offloads[a.lid] = self.offloads.get(a.lid, 0) + 1
            a.done = "recorded"
            return False
        return True

    def queue_pass(self) -> None:
        for aid, q in sorted(self.queue.items()):
            lid = q.ledger_id.id
            exists = lid in self.ledgers
            v = verdict(q, exists, self.ledgers.get(lid), self.now, STALE_MS)
            if self.bug_delete_live and exists and v is Verdict.KEEP:
                v = Verdict.DELETE
            if v is Verdict.KEEP:
                continue
            if v is Verdict.ABANDON:
                self.ledgers[lid] = None
            if self.rnd.random() < self.crash_chance:
                return  # a crash mid-pass: objects maybe deleted, entry kept
            self.objects.difference_update(q.files)
            del self.queue[aid]

    def check_recorded_present(self) -> str | None:
        for lid, rec in self.ledgers.items():
            if rec is not None and rec.state == OFFLOADED and not {f.name for f in rec.files} <= self.objects:
                return f"ledger {lid}: its OFFLOADED record names a missing object"
        return None


def run(seed: int, **bugs: bool) -> str | None:
    m = Model(random.Random(seed), **bugs)
    for _ in range(200):
        m.now += m.rnd.choice([1, 5, 20, 100, 400])
        op = m.rnd.random()
        if op < 0.2:
            m.append()
        elif op < 0.27:
            m.trim()
        elif op < 0.4:
            m.start_offloads()
        elif op < 0.86 and m.running:
            a = m.rnd.choice(m.running)
            if not m.advance(a):
                m.running.remove(a)
        elif op < 0.88:
            m.running.clear()  # kill -9 of the offloader: every attempt in flight stops where it is
        else:
            m.queue_pass()
        if (problem := m.check_recorded_present()) is not None:
            return problem
    m.running.clear()
    m.now += 2 * STALE_MS
    for _ in range(3):
        m.queue_pass()
    m.crash_chance = 0.0  # the last pass does not crash
    m.queue_pass()
    live = {f.name for rec in m.ledgers.values() if rec is not None and rec.offloaded for f in rec.files}
    if m.objects - live:
        return f"{len(m.objects - live)} orphan objects: {sorted(m.objects - live)[:3]}"
    if twice := [lid for lid, n in m.offloads.items() if n > 1]:
        return f"ledgers offloaded twice: {twice}"
    if m.trimmed_names & m.objects:
        return "a trimmed ledger's objects were kept"
    STATS["offloaded"] += sum(m.offloads.values())
    STATS["trimmed_offloaded"] += len(m.trimmed_names)
    return m.check_recorded_present()


STATS = {"offloaded": 0, "trimmed_offloaded": 0}


def test_offload_and_retention_interleavings() -> None:
    seeds = [int(os.environ["LEDGER_TEST_SEED"])] if "LEDGER_TEST_SEED" in os.environ else range(SEEDS)
    failures = [(s, p) for s in seeds if (p := run(s)) is not None]
    assert not failures, f"{len(failures)} seeds failed, first: seed {failures[0][0]}: {failures[0][1]}"
    if len(seeds) >= 100:  # the interleavings did exercise offloads and trims of offloaded ledgers
        assert STATS["offloaded"] >= len(seeds) // 2 and STATS["trimmed_offloaded"] >= len(seeds) // 10, STATS


@pytest.mark.parametrize("bug", ["bug_no_queue", "bug_delete_live"])
def test_planted_bugs_are_caught(bug: str) -> None:
    """Writing before queueing leaves orphans; a pass deleting a live attempt's objects loses data."""
    failed = [s for s in range(300) if run(s, **{bug: True}) is not None]
    assert failed, f"{bug} was never caught"
