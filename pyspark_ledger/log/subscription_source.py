"""Retention's view of the subscription store (metadata.subscriptions): positions and loss marks."""

from __future__ import annotations

from metadata.store import MetadataStore
from metadata.subscriptions import SubscriptionStore
from pyspark_ledger.log.trim_choice import SubscriptionAt


class StoreSubscriptions:
    """retention_pass.SubscriptionSource over the metadata store's subscription records."""

    def __init__(self, store: MetadataStore):
        self.subs = SubscriptionStore(store)

    def positions(self, log_name: str) -> list[SubscriptionAt]:
        out = []
        for sub in self.subs.list(log_name):
            p = sub.position
            # No position: nothing consumed, the subscription holds the whole log.
            out.append(SubscriptionAt(sub.name, 0, -1) if p is None else SubscriptionAt(sub.name, p.seq, p.entry_id,
                                                                                         p.index))
        return out

    def mark_lost(self, log_name: str, subscription: str, before_seq: int, lost_entries: int) -> None:
        self.subs.mark_lost(log_name, subscription, before_seq, lost_entries)


def store_subscriptions(store: MetadataStore) -> StoreSubscriptions:
    return StoreSubscriptions(store)
