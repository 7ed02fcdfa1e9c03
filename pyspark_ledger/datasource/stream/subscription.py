"""A stream's durable subscription (option `subscription`, metadata.subscriptions): where a query
without a checkpoint starts, and what every committed micro-batch records. No pyspark here.

Kafka's equivalent is committing offsets back to the broker (SPARK-27549): the checkpoint stays
the query's own truth; the subscription is the log service's copy of it, which an operator can
see (`ledger subscriptions list`, lag metrics), retention respects, and a query that lost its
checkpoint resumes from.

- Start (Spark's initialOffset, only for a query without a checkpoint): per log, after the
  subscription's position when the log has one; else startingPosition(s) as without the option.
  A subscription that retention marked as having lost data is data loss (failOnDataLoss: fail
  naming it, or go on with a warning); moving it (`ledger subscriptions move`) acknowledges it.
- Commit (the source's commit(end), which Spark calls once the micro-batch ending at `end` is
  committed, possibly late or twice): the subscription moves to the last entry before `end`,
  never backward; a log without the subscription gets it. A commit that fails (metadata
  unreachable) is logged and left to the next micro-batch's: the query goes on.
A stream's offsets are whole entries, so its positions are too: a subscription that a Python
reader left inside a batched entry resumes at the next entry.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from metadata import MetadataError
from metadata.errors import NoSuchLogError, NoSuchSubscriptionError, SubscriptionExistsError
from metadata.subscriptions import SubscriptionPosition, SubscriptionStore
from pyspark_ledger.datasource.read.cuts import DataLossError
from pyspark_ledger.datasource.read.log_view import HeadView
from pyspark_ledger.datasource.stream.offsets import LogOffset

if TYPE_CHECKING:
    from pyspark_ledger.client import LedgerClient

log = logging.getLogger(__name__)


def stored_position(at: LogOffset) -> SubscriptionPosition:
    """The stream's offset (the next entry to read) as a subscription's last consumed message."""
    if at.entry == 0:
        return SubscriptionPosition.before_ledger(at.seq)
    return SubscriptionPosition.after_entry(at.seq, at.entry - 1)


def subscription_start(client: LedgerClient, name: str, subscription: str, fail_on_data_loss: bool) -> LogOffset | None:
    """The next entry after the subscription's position in log `name`; None: no such subscription."""
    sub = SubscriptionStore(client.store).get(name, subscription)
    if sub is None:
        return None
    if sub.lost_data:
        message = (f"log {name!r}: subscription {subscription!r} lost {sub.lost_entries} entries that retention trimmed "
                   f"before seq {sub.lost_before_seq} (backlog policy trim)")
        if fail_on_data_loss:
            raise DataLossError(f"{message}. Move the subscription (`ledger subscriptions move`) to acknowledge the "
                                "loss, or set failOnDataLoss=false")
        log.warning("data loss (failOnDataLoss=false, going on): %s", message)
    view = HeadView(client, client.logs.read_head(name)[0])
    p = sub.position
    if p is None:  # nothing consumed yet: the whole log that remains
        first = view.at_or_after(0)
        return LogOffset(view.next_seq, 0) if first is None else LogOffset(first.seq, 0, first.ledger_id.qualified_name)
    seq, entry = (p.seq, 0) if p.entry_id < 0 else (p.seq, p.entry_id + 1)
    found = view.at_or_after(seq)
    ledger = found.ledger_id.qualified_name if found is not None and found.seq == seq else ""
    log.info("stream starts from its subscription log=%s subscription=%s seq=%d entry=%d", name, subscription, seq, entry)
    return LogOffset(seq, entry, ledger)


def commit_subscription(client: LedgerClient, end: Mapping[str, LogOffset], subscription: str) -> None:
    """Move the subscription of every log in `end` up to it (never backward); make it where missing."""
    subs = SubscriptionStore(client.store)
    for name in sorted(end):
        p = stored_position(end[name])
        try:
            try:
                subs.commit(name, subscription, p.seq, p.entry_id, p.index)
            except NoSuchSubscriptionError:
                try:
                    subs.create(name, subscription, p)
                except SubscriptionExistsError:  # made meanwhile (another run of the query): move it
                    subs.commit(name, subscription, p.seq, p.entry_id, p.index)
        except NoSuchLogError:
            log.warning("subscription not committed: the log is gone log=%s subscription=%s", name, subscription)
        except MetadataError as exc:
            log.warning("subscription not committed, the next micro-batch's commit will log=%s subscription=%s error=%s",
                        name, subscription, exc)
