"""Which whole ledgers a retention pass removes from the front of a log: pure (no I/O, no clock).

The rules, in the order they apply (docs/subscriptions.md, "Retention"):
- only a prefix goes (a log never gets holes), never the log's last ledger (the writer's) and
  never an unsealed ledger or anything after one;
- age: a ledger goes once it has been sealed longer than max_age_ms (`sealed_ms`, or `ctime_ms`
  for ledgers sealed by releases before the seal time was kept): a ledger that joined long ago
  but took entries until a minute ago is a minute old;
- size: the oldest ledgers go until the log holds at most max_size_bytes;
- subscriptions: nothing at or after the slowest subscription's ledger goes. With backlog_policy
  "trim" that hold covers only the newest backlog_quota_bytes (default max_size_bytes) of the
  slowest subscription's backlog: past that, age and size trim anyway, and every subscription
  whose ledger goes is reported lost (the caller marks it). With "keep" nothing is ever lost.
Age and size decide how much goes; subscriptions and the quota only ever hold some of it back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from metadata.log_record import LogLedger
from pyspark_ledger.errors import PySparkLedgerError

BACKLOG_KEEP = "keep"
BACKLOG_TRIM = "trim"
BACKLOG_POLICIES = (BACKLOG_KEEP, BACKLOG_TRIM)


class TrimChoiceError(PySparkLedgerError):
    """A broken precondition or postcondition of the choice: a bug, never bad input."""


def ensure(condition: bool, message: str) -> None:
    if not condition:
        raise TrimChoiceError(message)


@dataclass(frozen=True, slots=True)
class SubscriptionAt:
    """A subscription's committed position: it has consumed up to entry `entry_id` (message
    `index`) of the ledger with sequence number `seq`. Only `seq` matters to retention."""

    name: str
    seq: int
    entry_id: int = -1
    index: int = 0


@dataclass(frozen=True, slots=True)
class RetentionRules:
    max_age_ms: int | None = None
    max_size_bytes: int | None = None
    backlog_quota_bytes: int | None = None
    backlog_policy: str = BACKLOG_KEEP

    def __post_init__(self) -> None:
        ensure(self.backlog_policy in BACKLOG_POLICIES, f"backlog policy {self.backlog_policy!r} not in {BACKLOG_POLICIES}")
        for name in ("max_age_ms", "max_size_bytes", "backlog_quota_bytes"):
            value = getattr(self, name)
            ensure(value is None or value >= 0, f"{name} must be >= 0, got {value}")

    @property
    def any(self) -> bool:
        return self.max_age_ms is not None or self.max_size_bytes is not None


@dataclass(frozen=True, slots=True)
class TrimChoice:
    removed: tuple[LogLedger, ...]  # oldest first: a prefix of the ledgers given
    keep_from_seq: int  # the first seq kept (a trim point): every seq below it goes
    lost: tuple[tuple[str, int], ...] = ()  # (subscription, its unread entries that go) (policy trim)
    held_by_subscriptions: int = 0  # ledgers age or size wanted gone that a subscription kept

    @property
    def removed_bytes(self) -> int:
        return sum(lg.size_bytes or 0 for lg in self.removed)


def age_reference_ms(lg: LogLedger) -> int:
    """The time a ledger's age is counted from: its seal, else (older releases) its join."""
    return lg.ctime_ms if lg.sealed_ms is None else lg.sealed_ms


def trimmable_count(ledgers: Sequence[LogLedger]) -> int:
    """How many leading ledgers may go at all: sealed ones before the last and before any unsealed."""
    n = 0
    for lg in ledgers[:-1]:
        if not lg.sealed:
            break
        n += 1
    return n


def _wanted(ledgers: Sequence[LogLedger], rules: RetentionRules, now_ms: int, candidates: int) -> int:
    """How many leading ledgers age and size want gone."""
    age_n = 0
    if rules.max_age_ms is not None:
        while age_n < candidates and now_ms - age_reference_ms(ledgers[age_n]) > rules.max_age_ms:
            age_n += 1
    size_n = 0
    if rules.max_size_bytes is not None:
        total = sum(lg.size_bytes or 0 for lg in ledgers)
        while size_n < candidates and total > rules.max_size_bytes:
            total -= ledgers[size_n].size_bytes or 0
            size_n += 1
    return max(age_n, size_n)


def _held(ledgers: Sequence[LogLedger], rules: RetentionRules, subs: Sequence[SubscriptionAt]) -> int:
    """How many leading ledgers subscriptions let go (len(ledgers): no subscription)."""
    if not subs:
        return len(ledgers)
    slowest = min(s.seq for s in subs)
    hold = next((i for i, lg in enumerate(ledgers) if lg.seq >= slowest), len(ledgers))
    quota = rules.backlog_quota_bytes if rules.backlog_quota_bytes is not None else rules.max_size_bytes
    if rules.backlog_policy != BACKLOG_TRIM or quota is None:
        return hold
    # Policy trim: the slowest subscription keeps only the newest `quota` bytes of its backlog.
    backlog = sum(lg.size_bytes or 0 for lg in ledgers[hold:])
    while hold < len(ledgers) and backlog > quota:
        backlog -= ledgers[hold].size_bytes or 0
        hold += 1
    return hold


def unread_entries(sub: SubscriptionAt, removed: Sequence[LogLedger]) -> int:
    """Entries of `removed` the subscription had not consumed (it consumed up to `entry_id` of `seq`)."""
    total = 0
    for lg in removed:
        count = lg.entry_count or 0
        if lg.seq > sub.seq:
            total += count
        elif lg.seq == sub.seq:
            total += max(count - (sub.entry_id + 1), 0)
    return total


def choose(ledgers: Sequence[LogLedger], rules: RetentionRules, subs: Sequence[SubscriptionAt],
           now_ms: int) -> TrimChoice:
    """The ledgers of `ledgers` (the log's, oldest first, from its trim point) one pass removes."""
    seqs = [lg.seq for lg in ledgers]
    ensure(seqs == sorted(set(seqs)), "ledgers must be in log order")
    candidates = trimmable_count(ledgers)
    wanted = min(_wanted(ledgers, rules, now_ms, candidates), candidates)
    n = min(wanted, _held(ledgers, rules, subs))
    removed = tuple(ledgers[:n])
    keep_from = ledgers[n].seq if n < len(ledgers) else (seqs[-1] + 1 if seqs else 0)
    lost = tuple(sorted((s.name, unread_entries(s, removed)) for s in subs if s.seq < keep_from and removed))
    # Postconditions: a sealed prefix, never the last ledger, nothing lost unless the policy allows it.
    ensure(all(lg.sealed for lg in removed) and n <= max(len(ledgers) - 1, 0), "only sealed ledgers before the last go")
    ensure(not lost or rules.backlog_policy == BACKLOG_TRIM, f"subscriptions {lost} would lose data under policy keep")
    return TrimChoice(removed, keep_from, lost, wanted - n)
