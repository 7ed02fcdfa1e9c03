"""Durable named subscriptions in their own metadata nodes (issue 32 item 2), on both stores:
commits move forward only, records keep keys a newer release wrote, a loss is marked, and a
log's subscriptions go with the log without confusing anything that reads the log."""

from __future__ import annotations

import json
import threading

import pytest

from metadata import log_record
from metadata.errors import (
    CorruptMetadataError,
    NoSuchLogError,
    NoSuchSubscriptionError,
    SubscriptionExistsError,
)
from metadata.ids import LedgerId
from metadata.log_record import LogRecord
from metadata.logs import LogManager
from metadata.paths import log_path, log_subscriptions_path, subscription_path
from metadata.store import MetadataStore
from metadata.subscriptions import SubscriptionPosition, SubscriptionStore, decode, encode, slowest

P = SubscriptionPosition


def _log(store: MetadataStore, name: str = "events") -> LogManager:
    logs = LogManager(store)
    logs.create(LogRecord(name).with_ledger(LedgerId(0, 7)))
    return logs


def test_create_commit_list_delete(store: MetadataStore) -> None:
    _log(store)
    subs = SubscriptionStore(store)
    etl = subs.create("events", "etl")
    assert etl.position is None and etl.holds_from_seq == 0 and not etl.lost_data
    subs.create("events", "audit", P(0, 4))
    with pytest.raises(SubscriptionExistsError, match="etl"):
        subs.create("events", "etl")
    moved = subs.commit("events", "etl", 0, 9, 2)
    assert moved.position == P(0, 9, 2) and moved.commit_ms >= etl.commit_ms
    assert [s.name for s in subs.list("events")] == ["audit", "etl"]
    behind = slowest(subs.list("events"))
    assert behind is not None and behind.name == "audit"
    subs.delete("events", "audit")
    assert subs.get("events", "audit") is None and [s.name for s in subs.list("events")] == ["etl"]
    with pytest.raises(NoSuchSubscriptionError, match="audit"):
        subs.delete("events", "audit")
    with pytest.raises(NoSuchSubscriptionError, match="audit"):
        subs.commit("events", "audit", 1, 0)
    assert subs.get("events", "audit") is None  # a commit never makes a deleted subscription again


def test_commits_never_go_backward_unless_asked(store: MetadataStore) -> None:
    _log(store)
    subs = SubscriptionStore(store)
    subs.create("events", "etl", P(3, 10, 1))
    for behind in ((3, 10, 0), (3, 9, 5), (2, 99, 0)):
        assert subs.commit("events", "etl", *behind).position == P(3, 10, 1)  # a late or repeated commit
    version = subs.read("events", "etl").version
    assert subs.commit("events", "etl", 3, 10, 1).version == version  # the same position writes nothing
    assert subs.commit("events", "etl", 2, 0, allow_backward=True).position == P(2, 0)
    assert subs.move("events", "etl", None).position is None


def test_concurrent_commits_keep_the_furthest(store: MetadataStore) -> None:
    _log(store)
    subs = SubscriptionStore(store)
    subs.create("events", "etl")

    def commit_all(start: int) -> None:
        for entry in range(start, 40, 4):
            subs.commit("events", "etl", 1, entry)

    threads = [threading.Thread(target=commit_all, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert subs.read("events", "etl").position == P(1, 39)


def test_a_loss_is_marked_and_an_operators_move_clears_it(store: MetadataStore) -> None:
    _log(store)
    subs = SubscriptionStore(store)
    subs.create("events", "slow", P(2, 5))
    subs.create("events", "fast", P(9, 0))
    lost = subs.mark_lost("events", "slow", 6, 1200)
    assert lost.position == P.before_ledger(6) and lost.lost_before_seq == 6 and lost.lost_entries == 1200
    assert lost.holds_from_seq == 6 and lost.lost_ms is not None
    again = subs.mark_lost("events", "slow", 8, 300)
    assert (again.lost_before_seq, again.lost_entries) == (8, 1500)
    assert subs.mark_lost("events", "fast", 6, 50) == subs.read("events", "fast")  # consumed past it: nothing lost
    assert not subs.read("events", "fast").lost_data
    moved = subs.move("events", "slow", P(8, 3))
    assert moved.position == P(8, 3) and not moved.lost_data and moved.lost_entries == 0


def test_unknown_keys_survive_a_commit(store: MetadataStore) -> None:
    _log(store)
    subs = SubscriptionStore(store)
    subs.create("events", "etl")
    path = subscription_path("events", "etl")
    body = json.loads(store.read(path).value[16:])
    body["ackMode"] = {"individual": [1, 2]}  # a field a newer release wrote
    store.compare_and_set(path, log_record.envelope(b"PSUB", 1, body), 0)
    subs.commit("events", "etl", 0, 1)
    kept = json.loads(store.read(path).value[16:])
    assert kept["ackMode"] == {"individual": [1, 2]} and kept["position"] == {"seq": 0, "entry": 1, "index": 0}
    sub = subs.read("events", "etl")
    assert decode(encode(sub), "events", "etl").extra == sub.extra != ()


def test_a_damaged_record_is_refused_by_name(store: MetadataStore) -> None:
    _log(store)
    subs = SubscriptionStore(store)
    subs.create("events", "etl")
    path = subscription_path("events", "etl")
    data = bytearray(store.read(path).value)
    data[-2] ^= 0x01
    store.compare_and_set(path, bytes(data), 0)
    with pytest.raises(CorruptMetadataError, match="subscription 'etl'"):
        subs.read("events", "etl")


def test_no_subscription_without_a_log(store: MetadataStore) -> None:
    logs = _log(store)
    subs = SubscriptionStore(store)
    with pytest.raises(NoSuchLogError, match="nolog"):
        subs.create("nolog", "etl")
    assert logs.names() == ["events"] and store.get(log_path("nolog")) is None
    assert subs.list("nolog") == []


def test_a_deleted_log_takes_its_subscriptions_and_readers_of_the_log_ignore_them(store: MetadataStore) -> None:
    logs = _log(store)
    _log(store, "kept")
    subs = SubscriptionStore(store)
    for name in ("a", "b"):
        subs.create("events", name, P(0, 1))
        subs.create("kept", name)
    # The log's own reads and changes do not see the subscriptions.
    rec, _ = logs.update_head("events", lambda r: r.with_ledger(LedgerId(0, 8)))
    assert [lg.seq for lg in logs.read("events")[0].ledgers] == [0, 1] == [lg.seq for lg in rec.ledgers]
    assert sorted(logs.names()) == ["events", "kept"]
    logs.delete("events")
    assert store.get(log_subscriptions_path("events")) is None and store.get(log_path("events")) is None
    assert subs.list("events") == [] and [s.name for s in subs.list("kept")] == ["a", "b"]
    logs.create(LogRecord("events"))  # made again with the name: no subscription comes back
    assert subs.list("events") == []
