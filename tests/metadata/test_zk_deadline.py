"""Every ZooKeeperStore call has a deadline: with ZooKeeper killed (kill -9 of the server this test
started), reads and writes fail with MetadataUnavailableError naming the store and the deadline
instead of hanging; the store reconnects when ZooKeeper returns, and registrations say whether
they exist. A planted unbounded wait shows that the bounded runner catches a hang."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from metadata import MetadataUnavailableError, open_store
from metadata.registry import BookieInfo, BookieRegistry
from metadata.zookeeper_store import ZooKeeperStore
from pyspark_ledger.testing.zookeeper_server import LocalZooKeeper

# Generous bound for a call whose deadline is OP_TIMEOUT_MS: a hang, not slowness, fails the test.
OP_TIMEOUT_MS = 2000
HANG_BOUND_S = 30.0


class Hung(AssertionError):
    pass


def run_bounded(fn: Callable[[], Any], bound_s: float = HANG_BOUND_S) -> tuple[Any, BaseException | None]:
    """Run fn on a daemon thread; raise Hung if it has not returned within bound_s."""
    out: dict[str, Any] = {}

    def body() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            out["error"] = exc

    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(bound_s)
    if t.is_alive():
        raise Hung(f"the call did not return within {bound_s:g} s")
    return out.get("value"), out.get("error")


@pytest.fixture
def own_zk(tmp_path: Path) -> Iterator[LocalZooKeeper]:
    zk = LocalZooKeeper(tmp_path / "zk").start()
    try:
        yield zk
    finally:
        zk.close()


def _open(zk: LocalZooKeeper) -> ZooKeeperStore:
    store = open_store(zk.uri("/deadline") + f"?op_timeout_ms={OP_TIMEOUT_MS}&session_timeout_ms=4000")
    assert isinstance(store, ZooKeeperStore)
    return store


def _first_answer_after_restart(call: Callable[[], Any]) -> Any:
    """The store's own answer once kazoo has reconnected. Reconnection follows kazoo's retry back-off
    (up to 2 s between attempts, then a session re-established on a server that was just started),
    so a single call with a 2 s deadline may still be refused: each call stays bounded and is
    refused with MetadataUnavailableError, and the store must answer within HANG_BOUND_S."""
    deadline = time.monotonic() + HANG_BOUND_S
    started = time.monotonic()
    while True:
        got, error = run_bounded(call)
        if error is None:
            print(f"answered {time.monotonic() - started:.2f} s after the restart")
            return got
        assert isinstance(error, MetadataUnavailableError), f"after the restart: {error!r}"
        assert time.monotonic() < deadline, f"no answer within {HANG_BOUND_S:g} s of the restart: {error}"


def test_calls_fail_within_the_deadline_and_the_store_reconnects(own_zk: LocalZooKeeper) -> None:
    store = _open(own_zk)
    try:
        store.create("/a", b"before")
        own_zk.kill()
        calls: dict[str, Callable[[], Any]] = {
            "get": lambda: store.get("/a"),
            "children": lambda: store.children("/"),
            "create": lambda: store.create("/b", b"x"),
            "compare_and_set": lambda: store.compare_and_set("/a", b"after", 0),
            "delete": lambda: store.delete("/a", 0),
        }
        for name, call in calls.items():
            started = time.monotonic()
            _, error = run_bounded(call)
            print(f"{name}: {type(error).__name__} after {time.monotonic() - started:.2f} s")
            assert isinstance(error, MetadataUnavailableError), f"{name} returned {error!r}"
            assert store.uri in str(error) and f"{OP_TIMEOUT_MS / 1000:g} s deadline" in str(error)
        own_zk.start()  # same port, same data directory
        got = _first_answer_after_restart(lambda: store.get("/a"))
        assert got is not None and got.value == b"before"
        assert store.compare_and_set("/a", b"after", got.version) == got.version + 1
    finally:
        store.close()


def test_a_registration_is_not_registered_while_its_session_may_be_gone(own_zk: LocalZooKeeper) -> None:
    store, observer = _open(own_zk), None
    try:
        reg = BookieRegistry(store).register(BookieInfo("b1", "127.0.0.1:3181"))
        assert reg.registered
        own_zk.kill()
        deadline = time.monotonic() + HANG_BOUND_S
        while reg.registered and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not reg.registered, "still claims to be registered with ZooKeeper gone past the session timeout"
        own_zk.start()
        while not reg.registered and time.monotonic() < deadline:
            time.sleep(0.1)
        assert reg.registered
        observer = _open(own_zk)
        seen = BookieRegistry(observer).get("b1")
        assert seen is not None and seen.address == "127.0.0.1:3181"
    finally:
        store.close()
        if observer is not None:
            observer.close()


def test_planted_unbounded_wait_is_caught(own_zk: LocalZooKeeper, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bug this issue reported, planted back: a call retried after every connection loss with
    no bound (kazoo's own retry, as the synchronous API is used with it). The bounded runner must
    report it as a hang. (A bare unbounded wait is not enough to plant it: kazoo fails a request
    that is pending when it notices the drop with ConnectionLoss, so the wait can end at once.)"""
    store = _open(own_zk)
    try:
        monkeypatch.setattr(store, "_call", lambda async_fn, *a, **kw: store.kazoo_client.retry(
            lambda: async_fn(*a, **kw).get()))
        own_zk.kill()
        with pytest.raises(Hung):
            run_bounded(lambda: store.get("/a"), bound_s=3 * OP_TIMEOUT_MS / 1000)
        own_zk.start()  # lets the planted call finish, so its thread does not outlive the test
    finally:
        store.close()
