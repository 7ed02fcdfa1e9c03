"""ZooKeeper: a write whose reply is lost is resolved by re-reading, never misreported."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kazoo.exceptions import ConnectionLoss

from metadata import BadVersionError, NodeExistsError, OutcomeUnknownError, open_store
from metadata.zookeeper_store import ZooKeeperStore


def lose_reply(store: ZooKeeperStore, *, apply: bool, before: Callable[[], None] | None = None) -> None:
    """Fault seam: the next write request is (or is not) applied, then its reply is lost."""
    real_once = store._once
    state = {"armed": True}

    def once(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if state["armed"] and fn.__name__ != "get_async":
            state["armed"] = False
            if before:
                before()
            if apply:
                real_once(fn, *args, **kwargs)
            raise ConnectionLoss()
        return real_once(fn, *args, **kwargs)

    store._once = once


@pytest.fixture
def zk(zk_uri: str):
    s = open_store(zk_uri)
    assert isinstance(s, ZooKeeperStore)
    yield s
    s.close()


def test_applied_cas_with_lost_reply_is_a_success(zk: ZooKeeperStore) -> None:
    zk.create("/n", b"0")
    lose_reply(zk, apply=True)
    assert zk.compare_and_set("/n", b"1", 0) == 1
    assert zk.read("/n").value == b"1"


def test_unapplied_cas_with_lost_request_is_resent(zk: ZooKeeperStore) -> None:
    zk.create("/n", b"0")
    lose_reply(zk, apply=False)
    assert zk.compare_and_set("/n", b"1", 0) == 1
    assert zk.read("/n") .value == b"1"


def test_lost_cas_beaten_by_another_writer_is_a_conflict(zk: ZooKeeperStore, zk_uri: str) -> None:
    zk.create("/n", b"0")
    other = open_store(zk_uri)
    try:
        lose_reply(zk, apply=False, before=lambda: other.compare_and_set("/n", b"other", 0))
        with pytest.raises(BadVersionError):
            zk.compare_and_set("/n", b"mine", 0)
        assert zk.read("/n").value == b"other"
    finally:
        other.close()


def test_undecidable_outcome_is_reported_as_unknown(zk: ZooKeeperStore, zk_uri: str) -> None:
    zk.create("/n", b"0")
    other = open_store(zk_uri)
    try:
        def two_more_writes() -> None:
            other.compare_and_set("/n", b"a", 0)
            other.compare_and_set("/n", b"b", 1)

        lose_reply(zk, apply=False, before=two_more_writes)
        with pytest.raises(OutcomeUnknownError):
            zk.compare_and_set("/n", b"mine", 0)
    finally:
        other.close()


def test_applied_create_with_lost_reply_is_a_success(zk: ZooKeeperStore, zk_uri: str) -> None:
    lose_reply(zk, apply=True)
    assert zk.create("/c", b"x") == 0
    other = open_store(zk_uri)
    try:
        lose_reply(other, apply=False, before=lambda: None)
        with pytest.raises(NodeExistsError):
            other.create("/c", b"y")
    finally:
        other.close()
