"""One retention pass over one log: read its rules and subscriptions, choose (trim_choice, pure),
mark the subscriptions that lose data, trim (the crash-safe trim of retention.py), count it.

Order, for crash safety: subscriptions are marked lost BEFORE the trim point moves. A crash in
between leaves a mark with nothing trimmed yet (the next pass trims; the mark stays true then),
never a trim whose loss nobody was told of. The trim itself is retention.py's: one head CAS
raises the trim point (retention's counters and the boundary ledger's entry count ride in that
same CAS), the ledgers are deleted in bounded batches, and a crash leaves them queued for the
next pass. Subscriptions only move forward, except when an operator moves one back: a move back
racing a pass may find its ledger trimmed, which its reader then reports as data loss.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from metadata import LedgerId, log_settings, log_trim_marks
from metadata.context import now_ms
from metadata.log_record import LogLedger, LogRecord
from pyspark_ledger.log import trim_choice
from pyspark_ledger.log.retention import TRIM_DELETES_MAX, delete_trimmed, raise_trim_point
from pyspark_ledger.log.service import LedgerService
from pyspark_ledger.log.trim_choice import RetentionRules, SubscriptionAt

log = logging.getLogger(__name__)

LEDGERS_READ_MAX = 200_000  # ledgers one pass reads of one log (head + segments) at most


class SubscriptionSource(Protocol):
    """What retention needs of the subscription store (metadata.subscriptions)."""

    def positions(self, log_name: str) -> list[SubscriptionAt]: ...

    def mark_lost(self, log_name: str, subscription: str, before_seq: int, lost_entries: int) -> None: ...


@dataclass(frozen=True, slots=True)
class PassOutcome:
    log_name: str
    trimmed: tuple[LedgerId, ...] = ()  # the ledgers the pass's trim point passed
    trimmed_bytes: int = 0
    deleted: int = 0  # ledgers deleted by this pass (its own and any queued before)
    lost: tuple[str, ...] = ()  # subscriptions marked as having lost data
    held: int = 0  # ledgers age or size wanted gone that a subscription kept
    read_ledgers: int = 0  # the ledgers the pass read (its cost)


def rules_of(rec: LogRecord) -> RetentionRules:
    quota = log_settings.get(rec, "backlog_quota_bytes")
    policy = log_settings.get(rec, "backlog_policy")
    return RetentionRules(rec.retention.max_age_ms, rec.retention.max_size_bytes,
                          quota if isinstance(quota, int) else None,
                          policy if isinstance(policy, str) else trim_choice.BACKLOG_KEEP)


def apply_retention(client: LedgerService, name: str, subscriptions: SubscriptionSource | None, *,
                    delete_max: int = TRIM_DELETES_MAX, now: int | None = None,
                    positions: Sequence[SubscriptionAt] | None = None) -> PassOutcome:
    """Apply the log's retention once. `positions` (tests) stands in for the store's."""
    logs = client.logs
    head, _ = logs.read_head(name)
    rules = rules_of(head.record)
    if not rules.any:
        deleted = delete_trimmed(client, name, delete_max)  # a queue left by a crash still drains
        return PassOutcome(name, deleted=len(deleted))
    ledgers: list[LogLedger] = []
    for lg in logs.iter_ledgers(name, head, head.trim_seq):
        if len(ledgers) >= LEDGERS_READ_MAX:
            break  # the oldest LEDGERS_READ_MAX: sizes beyond are not seen, so size trims less, never more
        ledgers.append(lg)
    if positions is None:
        positions = subscriptions.positions(name) if subscriptions is not None else []
    at = now_ms() if now is None else now
    choice = trim_choice.choose(ledgers, rules, positions, at)
    if not choice.removed:
        deleted = delete_trimmed(client, name, delete_max)
        return PassOutcome(name, deleted=len(deleted), held=choice.held_by_subscriptions, read_ledgers=len(ledgers))
    for sub, entries in choice.lost:
        if subscriptions is not None:
            subscriptions.mark_lost(name, sub, choice.keep_from_seq, entries)
        log.warning("retention trims past a subscription (backlog policy trim): it lost data log=%s subscription=%s "
                    "trim_seq=%d lost_entries=%d", name, sub, choice.keep_from_seq, entries)
    removed = {lg.seq: lg for lg in choice.removed}

    def counted(r: LogRecord, upto: int) -> LogRecord:
        gone = [lg for seq, lg in removed.items() if seq < upto]
        if not gone:
            return r
        return log_trim_marks.with_retention_trim(r, len(gone), sum(lg.size_bytes or 0 for lg in gone), at)

    upto = raise_trim_point(logs, name, choice.keep_from_seq, counted)
    gone = tuple(lg for lg in choice.removed if lg.seq < upto)
    deleted = delete_trimmed(client, name, delete_max)
    log.info("retention trimmed log=%s ledgers=%d bytes=%d trim_seq=%d", name, len(gone),
             sum(lg.size_bytes or 0 for lg in gone), upto)
    return PassOutcome(name, tuple(lg.ledger_id for lg in gone), sum(lg.size_bytes or 0 for lg in gone),
                       len(deleted), tuple(sub for sub, _ in choice.lost), choice.held_by_subscriptions, len(ledgers))
