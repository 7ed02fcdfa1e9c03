"""Durable named subscriptions: a consumer's position in a log, kept by the log service.

    /logs/<log>/subscriptions/<name>    one record per subscription (never in the log record)

Pulsar's durable cursor, Kafka's committed offset of a consumer group. A record holds the last
message the subscription consumed (`position`: ledger seq, entry id, index in the entry, plain
ints: this layer knows no client types), when it was last committed, and the data it lost when
retention trimmed past it (backlog policy `trim`). A reader resumes AFTER `position`. No
position means nothing consumed yet: the subscription holds the whole log. An entry id of -1
means "before the ledger's first entry" (a subscription moved to the start of ledger `seq`);
an index of INDEX_WHOLE_ENTRY means "every message of the entry" (one moved past an entry
whose messages it never counted, e.g. to a log's latest entry).

Each record is its own small value, changed by compare-and-set on its version, so a consumer's
commit never touches the log record and never races the log's writer. Stored like the log
record: a checksummed, versioned envelope around JSON; keys this release does not know are
kept and written back unchanged by every compare-and-set.

    magic b"PSUB" | format version u16 | reserved u16 | body length u32 | CRC32C(body) u32 | JSON body
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from metadata.context import now_ms
from metadata.errors import (
    CorruptMetadataError,
    InvalidMetadataError,
    MetadataError,
    NodeExistsError,
    NoNodeError,
    NoSuchLogError,
    NoSuchSubscriptionError,
    SubscriptionExistsError,
)
from metadata.log_record import envelope, open_envelope
from metadata.paths import log_path, log_subscriptions_path, subscription_path
from metadata.store import MetadataStore, RetryPolicy, cas_update

SUBSCRIPTION_FORMAT_VERSION = 1
_MAGIC = b"PSUB"
SUBSCRIPTIONS_PER_LOG_MAX = 10_000  # list() reads each record: a bound on one listing's reads
# Above any index a batched entry holds (protocol.message_batch.MESSAGES_PER_ENTRY_MAX = 10,000).
INDEX_WHOLE_ENTRY = 2**31 - 1
_KEYS = frozenset({"log", "name", "formatVersion", "position", "ctimeMs", "commitMs",
                   "lostBeforeSeq", "lostEntries", "lostMs"})


@dataclass(frozen=True, order=True, slots=True)
class SubscriptionPosition:
    """The last message a subscription consumed, ordered like a log position. entry_id -1:
    nothing of ledger `seq` consumed yet (the subscription resumes at its first entry)."""

    seq: int
    entry_id: int
    index: int = 0

    def __post_init__(self) -> None:
        if self.seq < 0 or self.entry_id < -1 or self.index < 0 or (self.entry_id == -1 and self.index):
            raise InvalidMetadataError(f"bad subscription position {self.seq}:{self.entry_id}:{self.index}")

    @classmethod
    def before_ledger(cls, seq: int) -> SubscriptionPosition:
        """Nothing of ledger `seq` (or after it) consumed."""
        return cls(seq, -1, 0)

    @classmethod
    def after_entry(cls, seq: int, entry_id: int) -> SubscriptionPosition:
        """Every message of entry `entry_id` of ledger `seq` consumed, however many it holds."""
        return cls(seq, entry_id, INDEX_WHOLE_ENTRY)


@dataclass(frozen=True, slots=True)
class Subscription:
    log: str
    name: str
    position: SubscriptionPosition | None  # the last message consumed; None: none yet (holds the whole log)
    ctime_ms: int
    commit_ms: int  # when the position last moved (created, committed, moved or marked lost)
    # Set when retention trimmed ledgers this subscription had not consumed (backlog policy
    # `trim`): every seq below lost_before_seq is gone, lost_entries counts the unread entries.
    # Kept until an operator moves the subscription (the move acknowledges the loss).
    lost_before_seq: int | None = None
    lost_entries: int = 0
    lost_ms: int | None = None
    version: int = -1  # the stored version it was read at (not stored)
    extra: tuple[tuple[str, str], ...] = ()  # keys a newer release wrote: (key, JSON), kept as they are

    @property
    def holds_from_seq(self) -> int:
        """The lowest ledger seq this subscription still needs: retention keeps it and every later
        one (unless the backlog policy says trim). A position at a ledger's last entry still
        names that ledger: only the log knows where a ledger ends."""
        return 0 if self.position is None else self.position.seq

    @property
    def lost_data(self) -> bool:
        return self.lost_before_seq is not None


def slowest(subscriptions: list[Subscription]) -> Subscription | None:
    """The subscription that holds the most of the log (ties: the first by name)."""
    return min(sorted(subscriptions, key=lambda s: s.name), key=lambda s: s.holds_from_seq, default=None)


def _position_to_json(p: SubscriptionPosition | None) -> dict[str, int] | None:
    return None if p is None else {"seq": p.seq, "entry": p.entry_id, "index": p.index}


def _position_from_json(d: dict[str, Any] | None) -> SubscriptionPosition | None:
    return None if d is None else SubscriptionPosition(int(d["seq"]), int(d["entry"]), int(d.get("index", 0)))


def encode(sub: Subscription) -> bytes:
    d: dict[str, Any] = {
        "log": sub.log, "name": sub.name, "formatVersion": SUBSCRIPTION_FORMAT_VERSION,
        "position": _position_to_json(sub.position), "ctimeMs": sub.ctime_ms, "commitMs": sub.commit_ms,
        "lostBeforeSeq": sub.lost_before_seq, "lostEntries": sub.lost_entries, "lostMs": sub.lost_ms,
    }
    for key, value in sub.extra:
        d.setdefault(key, json.loads(value))
    return envelope(_MAGIC, SUBSCRIPTION_FORMAT_VERSION, d)


def decode(data: bytes, log: str, name: str, version: int = -1) -> Subscription:
    where = f"log {log!r} subscription {name!r}"
    _, body = open_envelope(data, _MAGIC, SUBSCRIPTION_FORMAT_VERSION, where)
    try:
        d = json.loads(body)
        lost = d.get("lostBeforeSeq")
        lost_ms = d.get("lostMs")
        return Subscription(
            log=str(d["log"]), name=str(d["name"]), position=_position_from_json(d.get("position")),
            ctime_ms=int(d["ctimeMs"]), commit_ms=int(d["commitMs"]),
            lost_before_seq=None if lost is None else int(lost), lost_entries=int(d.get("lostEntries", 0)),
            lost_ms=None if lost_ms is None else int(lost_ms), version=version,
            extra=tuple(sorted((k, json.dumps(v, sort_keys=True)) for k, v in d.items() if k not in _KEYS)),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CorruptMetadataError(f"{where}: stored record is invalid: {exc}") from exc


def _pos_tuple(p: SubscriptionPosition | None) -> tuple[int, int, int]:
    return (-1, -1, -1) if p is None else (p.seq, p.entry_id, p.index)


class SubscriptionStore:
    """The subscriptions of every log, in the metadata store. Every change is a CAS loop."""

    def __init__(self, store: MetadataStore, retry: RetryPolicy | None = None):
        self.store = store
        self.retry = retry or RetryPolicy()

    def create(self, log: str, name: str, position: SubscriptionPosition | None = None) -> Subscription:
        """A new subscription at `position` (None: nothing consumed, it reads the log from its start)."""
        path = subscription_path(log, name)
        if not self._log_exists(log):
            raise NoSuchLogError(f"no such log {log!r}")
        at = now_ms()
        sub = Subscription(log, name, position, at, at)
        try:
            version = self.store.create(path, encode(sub))
        except NodeExistsError:
            raise SubscriptionExistsError(f"log {log!r} already has a subscription {name!r}") from None
        if not self._log_exists(log):  # the log was deleted meanwhile: leave nothing behind
            self._forget_orphan(log, path)
            raise NoSuchLogError(f"no such log {log!r}")
        return replace(sub, version=version)

    def get(self, log: str, name: str) -> Subscription | None:
        got = self.store.get(subscription_path(log, name))
        return None if got is None else decode(got.value, log, name, got.version)

    def read(self, log: str, name: str) -> Subscription:
        sub = self.get(log, name)
        if sub is None:
            raise NoSuchSubscriptionError(f"log {log!r} has no subscription {name!r}")
        return sub

    def list(self, log: str) -> list[Subscription]:
        """Every subscription of `log`, by name ([] for a log without any, or no such log)."""
        names = self.store.children(log_subscriptions_path(log))
        if len(names) > SUBSCRIPTIONS_PER_LOG_MAX:
            raise InvalidMetadataError(f"log {log!r}: more than {SUBSCRIPTIONS_PER_LOG_MAX} subscriptions")
        found = (self.get(log, name) for name in names)
        return [sub for sub in found if sub is not None]  # one deleted meanwhile is simply gone

    def commit(self, log: str, name: str, seq: int, entry_id: int, index: int = 0, *,
               allow_backward: bool = False) -> Subscription:
        """Move the position to (seq, entry_id, index), the last message consumed. A commit behind
        the stored position changes nothing (a late or repeated commit) unless allow_backward.
        Returns the subscription as stored after the call."""
        target = SubscriptionPosition(seq, entry_id, index)

        def change(sub: Subscription) -> Subscription | None:
            if target == sub.position or (not allow_backward and _pos_tuple(target) < _pos_tuple(sub.position)):
                return None
            return replace(sub, position=target, commit_ms=now_ms())

        return self._update(log, name, change)

    def move(self, log: str, name: str, position: SubscriptionPosition | None) -> Subscription:
        """An operator's reset (Kafka's offset reset tool): to `position` in either direction
        (None: the log's start). Clears the loss marker: the move acknowledges the loss."""

        def change(sub: Subscription) -> Subscription:
            return replace(sub, position=position, commit_ms=now_ms(), lost_before_seq=None, lost_entries=0,
                           lost_ms=None)

        return self._update(log, name, change)

    def mark_lost(self, log: str, name: str, before_seq: int, lost_entries: int) -> Subscription:
        """Retention trimmed every ledger below `before_seq`, `lost_entries` of them unread by this
        subscription: move it to the start of ledger `before_seq` and say so. No change when the
        subscription had already consumed past that point (nothing of it was lost)."""
        if before_seq < 0 or lost_entries < 0:
            raise InvalidMetadataError(f"bad loss: before seq {before_seq}, {lost_entries} entries")

        def change(sub: Subscription) -> Subscription | None:
            if sub.holds_from_seq >= before_seq:
                return None
            at = now_ms()
            return replace(sub, position=SubscriptionPosition.before_ledger(before_seq), commit_ms=at,
                           lost_before_seq=max(before_seq, sub.lost_before_seq or 0),
                           lost_entries=sub.lost_entries + lost_entries, lost_ms=at)

        return self._update(log, name, change)

    def delete(self, log: str, name: str) -> None:
        try:
            self.store.delete(subscription_path(log, name))
        except NoNodeError:
            raise NoSuchSubscriptionError(f"log {log!r} has no subscription {name!r}") from None

    def _update(self, log: str, name: str, change: Callable[[Subscription], Subscription | None]) -> Subscription:
        path = subscription_path(log, name)

        def write(sub: Subscription, version: int) -> int:
            try:
                return self.store.compare_and_set(path, encode(sub), version)
            except NoNodeError:  # deleted meanwhile: never made again by a commit
                raise NoSuchSubscriptionError(f"log {log!r} has no subscription {name!r}") from None

        def read() -> tuple[Subscription, int]:
            sub = self.read(log, name)
            return sub, sub.version

        sub, version = cas_update(read, write, change, self.retry)
        return replace(sub, version=version)

    def _log_exists(self, log: str) -> bool:
        # The store makes missing parents empty: an empty node at the log's path is no log.
        got = self.store.get(log_path(log))
        return got is not None and got.value != b""

    def _forget_orphan(self, log: str, path: str) -> None:
        """Undo a create that raced the log's deletion: the record, then the empty parents the
        store made for it (only while they are empty: a log made again meanwhile is kept)."""
        for node in (path, log_subscriptions_path(log), log_path(log)):
            got = self.store.get(node)
            if got is None or (node != path and got.value != b""):
                continue
            try:
                self.store.delete(node, got.version)
            except MetadataError:  # changed, or has children now (a log made again): not ours
                return
