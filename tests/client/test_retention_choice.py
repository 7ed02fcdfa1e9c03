"""The retention choice (pyspark_ledger.log.trim_choice), pure, over 1,000 seeded interleavings of
appends, rollovers, subscription commits and retention passes (issue 32 item 3).

The checker is written from the rules, not from the code: after every pass,
- what went is a prefix of the log, sealed, never the last ledger;
- no subscription lost an entry it had not consumed unless the backlog policy is trim, and then
  the pass reports it, with the exact number of entries;
- retention did its job: the first ledger left is not one that age or size wants gone, unless a
  subscription holds it (policy keep, or a backlog within the quota).
A planted bug (a choice that holds only the ledgers AFTER the slowest subscription's) is caught.
Replay one interleaving: RETENTION_SEED=<seed>.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from metadata import LedgerId
from metadata.log_record import LogLedger
from pyspark_ledger.log import trim_choice
from pyspark_ledger.log.trim_choice import RetentionRules, SubscriptionAt, TrimChoice, age_reference_ms

INTERLEAVINGS = 1_000
STEPS = 60
Chooser = Callable[[Sequence[LogLedger], RetentionRules, Sequence[SubscriptionAt], int], TrimChoice]


@dataclass
class Model:
    """A log as its record sees it (the open ledger's entries are unknown to the record) and the
    subscriptions' committed positions, with what each lost."""

    rules: RetentionRules
    ledgers: list[LogLedger] = field(default_factory=list)
    open_entries: int = 0  # entries in the last (open) ledger
    now: int = 1_000_000
    subs: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (seq, entry id) consumed
    next_seq: int = 0

    def open_ledger(self) -> None:
        self.ledgers.append(LogLedger(self.next_seq, LedgerId(0, self.next_seq + 1), self.now))
        self.next_seq += 1
        self.open_entries = 0

    def roll_over(self, rng: random.Random) -> None:
        last = self.ledgers[-1]
        size = self.open_entries * rng.choice((10, 100, 1000))
        self.ledgers[-1] = replace(last, entry_count=self.open_entries, size_bytes=size,
                                   sealed_ms=None if rng.random() < 0.1 else self.now)  # some sealed by old releases
        self.open_ledger()

    def written(self) -> list[tuple[int, int]]:
        """Every (seq, entry) a reader can have consumed (still in the log)."""
        out = []
        for lg in self.ledgers:
            count = self.open_entries if lg.entry_count is None else lg.entry_count
            out += [(lg.seq, e) for e in range(count)]
        return out

    def positions(self) -> list[SubscriptionAt]:
        return [SubscriptionAt(n, seq, entry) for n, (seq, entry) in sorted(self.subs.items())]


def unread_in(removed: Sequence[LogLedger], at: tuple[int, int]) -> int:
    seq, entry = at
    return sum((lg.entry_count or 0) if lg.seq > seq else max((lg.entry_count or 0) - entry - 1, 0)
               for lg in removed if lg.seq >= seq)


def check_pass(m: Model, before: list[LogLedger], choice: TrimChoice) -> None:
    rules, n = m.rules, len(choice.removed)
    assert list(choice.removed) == before[:n], "only a prefix of the log goes"
    assert all(lg.sealed for lg in choice.removed) and n < max(len(before), 1), "sealed ledgers before the last only"
    lost = dict(choice.lost)
    for name, at in m.subs.items():
        unread = unread_in(choice.removed, at)
        if any(lg.seq >= at[0] for lg in choice.removed):
            assert rules.backlog_policy == "trim", f"{name} at {at}: a ledger at or after it went under policy keep"
            assert lost.get(name) == unread, f"{name} at {at}: lost {unread} entries, reported {lost.get(name)}"
        else:
            assert name not in lost, f"{name} at {at} lost nothing but is reported"
    _check_did_its_job(m, before[n:])


def _check_did_its_job(m: Model, left: list[LogLedger]) -> None:
    rules = m.rules
    if len(left) < 2 or not left[0].sealed:
        return  # nothing may go: the last ledger, or an unsealed one, is first
    first = left[0]
    wanted = (rules.max_age_ms is not None and m.now - age_reference_ms(first) > rules.max_age_ms) or \
        (rules.max_size_bytes is not None and sum(lg.size_bytes or 0 for lg in left) > rules.max_size_bytes)
    if not wanted:
        return
    holders = [at for at in m.subs.values() if at[0] <= first.seq]
    if not holders:
        raise AssertionError(f"ledger seq {first.seq} is wanted gone by age or size and no subscription holds it")
    quota = rules.backlog_quota_bytes if rules.backlog_quota_bytes is not None else rules.max_size_bytes
    slowest = min(at[0] for at in m.subs.values())
    backlog = sum(lg.size_bytes or 0 for lg in left if lg.seq >= slowest)
    if rules.backlog_policy == "trim" and quota is not None and backlog > quota:
        raise AssertionError(f"the slowest subscription's backlog {backlog} is over the quota {quota} (policy "
                             f"trim), yet ledger seq {first.seq}, wanted gone, stays")


def random_rules(rng: random.Random) -> RetentionRules:
    return RetentionRules(
        max_age_ms=rng.choice((None, 0, 500, 5_000)),
        max_size_bytes=rng.choice((None, 0, 2_000, 20_000)),
        backlog_quota_bytes=rng.choice((None, 0, 1_000, 10_000)),
        backlog_policy=rng.choice(("keep", "trim")),
    )


def run_interleaving(seed: int, chooser: Chooser) -> Model:
    rng = random.Random(seed)
    m = Model(random_rules(rng))
    m.open_ledger()
    for _ in range(STEPS):
        m.now += rng.randrange(0, 400)
        op = rng.random()
        if op < 0.35:
            m.open_entries += rng.randrange(1, 20)
        elif op < 0.5:
            if m.open_entries:
                m.roll_over(rng)
        elif op < 0.6 and len(m.subs) < 3:
            written = m.written()
            m.subs[f"s{len(m.subs)}"] = (m.ledgers[0].seq, -1) if not written or rng.random() < 0.5 else \
                rng.choice(written)
        elif op < 0.8 and m.subs:
            name = rng.choice(sorted(m.subs))
            later = [w for w in m.written() if w > m.subs[name]]
            if later:
                m.subs[name] = rng.choice(later)  # commits only move forward
        else:
            before = list(m.ledgers)
            choice = chooser(before, m.rules, m.positions(), m.now)
            check_pass(m, before, choice)
            m.ledgers = before[len(choice.removed):]
            for name, _ in choice.lost:  # marked lost: the subscription resumes at the first ledger kept
                m.subs[name] = (choice.keep_from_seq, -1)
    return m


def seeds() -> list[int]:
    one = os.environ.get("RETENTION_SEED")
    return [int(one)] if one else list(range(INTERLEAVINGS))


def test_the_choice_keeps_every_rule_over_seeded_interleavings() -> None:
    for seed in seeds():
        try:
            run_interleaving(seed, trim_choice.choose)
        except AssertionError as exc:
            raise AssertionError(f"seed {seed} (replay: RETENTION_SEED={seed}): {exc}") from exc


def holds_only_after_the_slowest(ledgers: Sequence[LogLedger], rules: RetentionRules,
                                 subs: Sequence[SubscriptionAt], now: int) -> TrimChoice:
    """Planted bug: treats a subscription as done with its own ledger (one seq too generous)."""
    return trim_choice.choose(ledgers, rules, [replace(s, seq=s.seq + 1) for s in subs], now)


def test_the_checker_catches_a_planted_off_by_one() -> None:
    caught = []
    for seed in range(INTERLEAVINGS):
        try:
            run_interleaving(seed, holds_only_after_the_slowest)
        except AssertionError as exc:
            caught.append((seed, str(exc)))
    assert caught, "the planted bug went unnoticed"
    assert any("went under policy keep" in msg or "lost" in msg for _, msg in caught), caught[:3]


def test_the_checker_catches_a_choice_that_forgets_age() -> None:
    def no_age(ledgers: Sequence[LogLedger], rules: RetentionRules, subs: Sequence[SubscriptionAt],
               now: int) -> TrimChoice:
        return trim_choice.choose(ledgers, replace(rules, max_age_ms=None), subs, now)

    with pytest.raises(AssertionError, match="wanted gone"):
        for seed in range(INTERLEAVINGS):
            run_interleaving(seed, no_age)


def ledger(seq: int, size: int, sealed_ms: int | None, ctime_ms: int = 0, entries: int = 10) -> LogLedger:
    return LogLedger(seq, LedgerId(0, seq + 1), ctime_ms, entries, size, sealed_ms)


def test_age_is_judged_by_the_seal_time() -> None:
    # Joined at 0, sealed at 9,000: at 10,000 it is one second old, not ten.
    log = [ledger(0, 100, sealed_ms=9_000), ledger(1, 100, sealed_ms=9_500), ledger(2, 0, None, entries=0)]
    log[2] = replace(log[2], entry_count=None, size_bytes=None)
    assert trim_choice.choose(log, RetentionRules(max_age_ms=5_000), (), 10_000).removed == ()
    assert [lg.seq for lg in trim_choice.choose(log, RetentionRules(max_age_ms=900), (), 10_000).removed] == [0]
    # A ledger sealed by a release before seal times: its join time counts.
    old = [replace(log[0], sealed_ms=None), *log[1:]]
    assert [lg.seq for lg in trim_choice.choose(old, RetentionRules(max_age_ms=5_000), (), 10_000).removed] == [0]


def test_policy_trim_reports_the_loss_and_keep_never_does() -> None:
    log = [ledger(i, 1_000, sealed_ms=0) for i in range(5)] + [ledger(5, 0, None, entries=0)]
    sub = [SubscriptionAt("etl", 1, 4)]  # consumed entries 0..4 of seq 1: 5 of its 10 are unread
    keep = trim_choice.choose(log, RetentionRules(max_size_bytes=2_000), sub, 1)
    assert [lg.seq for lg in keep.removed] == [0] and keep.lost == () and keep.held_by_subscriptions == 2
    trim = trim_choice.choose(log, RetentionRules(max_size_bytes=2_000, backlog_policy="trim"), sub, 1)
    assert [lg.seq for lg in trim.removed] == [0, 1, 2] and trim.lost == (("etl", 5 + 10),)
    # A quota bigger than the backlog: the subscription holds, even under policy trim.
    roomy = trim_choice.choose(log, RetentionRules(max_size_bytes=2_000, backlog_quota_bytes=4_000,
                                                   backlog_policy="trim"), sub, 1)
    assert [lg.seq for lg in roomy.removed] == [0] and roomy.lost == ()


def test_a_retention_pass_is_bounded_and_goes_on_where_the_last_stopped(tmp_path: Path) -> None:
    """The leader's task (autorecovery/retention_task.py) over the embedded store, no bookies
    needed: logs without retention settings cost one head read each and delete nothing."""
    from metadata.log_record import LogRecord
    from metadata.logs import LogManager
    from metadata.uri import open_store
    from pyspark_ledger.autorecovery.metrics import AutorecoveryMetrics
    from pyspark_ledger.autorecovery.retention_task import RetentionSettings, RetentionTask

    store = open_store(f"sqlite://{tmp_path / 'm.db'}")
    try:
        logs = LogManager(store)
        for name in "abcde":
            logs.create(LogRecord(name))
        deleted: list[LedgerId] = []
        service = SimpleNamespace(logs=logs, delete_ledger=deleted.append)
        metrics = AutorecoveryMetrics()
        task = RetentionTask(service, None, RetentionSettings(interval_s=60, logs_per_pass=2), metrics)  # type: ignore[arg-type]  # a stand-in LedgerService: logs and delete_ledger only
        assert task.due()
        visited = [[o.log_name for o in task.run_pass()] for _ in range(3)]
        assert visited == [["a", "b"], ["c", "d"], ["e", "a"]] and not task.due()
        assert [o.log_name for o in task.run_pass(only="c")] == ["c"] and not deleted
        assert metrics.retention_passes._value.get() == 4
        with pytest.raises(ValueError, match="logs-per-pass"):
            RetentionSettings(logs_per_pass=0).validate()
    finally:
        store.close()
