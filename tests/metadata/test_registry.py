"""Bookie registry: registrations vanish with their owner and come back with it."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from metadata import BookieInfo, BookieRegistry, MetadataStore, open_store
from metadata.zookeeper_store import ZooKeeperStore
from pyspark_ledger.testing.zookeeper_server import LocalZooKeeper, expire_session

REPO = Path(__file__).resolve().parents[2]


class Membership:
    """Records every membership callback so tests can wait for a given view."""

    def __init__(self) -> None:
        self.views: list[list[str]] = []
        self.cond = threading.Condition()

    def __call__(self, ids: list[str]) -> None:
        with self.cond:
            self.views.append(list(ids))
            self.cond.notify_all()

    def wait_for(self, predicate, timeout_s: float = 20.0) -> list[str]:
        with self.cond:
            ok = self.cond.wait_for(lambda: self.views and predicate(self.views[-1]), timeout=timeout_s)
            assert ok, f"membership never satisfied the condition; views={self.views}"
            return self.views[-1]


def test_register_list_read_only_and_close(store: MetadataStore) -> None:
    registry = BookieRegistry(store)
    members = Membership()
    registry.watch(members)
    reg1 = registry.register(BookieInfo("bookie-1", "127.0.0.1:3181"))
    reg2 = registry.register(BookieInfo("bookie-2", "127.0.0.1:3182"))
    members.wait_for(lambda v: v == ["bookie-1", "bookie-2"])
    assert {b.bookie_id for b in registry.list()} == {"bookie-1", "bookie-2"}
    before = len(members.views)
    reg2.set_read_only(True)
    # The watch fires on a read-only change too (membership of the writable set changed).
    with members.cond:
        assert members.cond.wait_for(lambda: len(members.views) > before, timeout=20)
    assert [b.bookie_id for b in registry.list(read_only=False)] == ["bookie-1"]
    assert [b.bookie_id for b in registry.list(writable=False)] == ["bookie-2"]
    reg1.close()
    members.wait_for(lambda v: v == ["bookie-2"])
    reg2.close()
    members.wait_for(lambda v: v == [])


def test_zookeeper_session_expiry_reregisters(zk_server: LocalZooKeeper, zk_uri: str) -> None:
    owner = open_store(zk_uri + "?session_timeout_ms=4000")
    observer = open_store(zk_uri)
    try:
        assert isinstance(owner, ZooKeeperStore)
        members = Membership()
        BookieRegistry(observer).watch(members)
        BookieRegistry(owner).register(BookieInfo("bookie-x", "127.0.0.1:3181"))
        members.wait_for(lambda v: v == ["bookie-x"])
        old_session = owner.session_id()
        expire_session(zk_server.hosts, owner.kazoo_client.client_id)
        # The ephemeral node disappears with the session...
        members.wait_for(lambda v: v == [])
        # ...and the owner re-registers under its new session, which the watch sees.
        members.wait_for(lambda v: v == ["bookie-x"])
        assert owner.session_id() != old_session
        assert BookieRegistry(observer).get("bookie-x") is not None
    finally:
        owner.close()
        observer.close()


def test_embedded_registration_expires_when_heartbeat_stops(tmp_path: Path) -> None:
    uri = f"sqlite://{tmp_path / 'meta.db'}?ttl_ms=1000&poll_ms=50"
    ready = tmp_path / "ready"
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from tests.metadata.workers import register_and_wait; register_and_wait(*sys.argv[1:])",
         uri, "bookie-ttl", str(ready)],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    observer = open_store(uri)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert time.monotonic() < deadline and child.poll() is None, "registrar did not start"
            time.sleep(0.05)
        members = Membership()
        BookieRegistry(observer).watch(members)
        members.wait_for(lambda v: v == ["bookie-ttl"])
        time.sleep(1.5)  # longer than the TTL: the live heartbeat keeps it registered
        assert [b.bookie_id for b in BookieRegistry(observer).list()] == ["bookie-ttl"]
        child.send_signal(signal.SIGKILL)  # the heartbeat stops
        child.wait(timeout=10)
        killed_at = time.monotonic()
        members.wait_for(lambda v: v == [], timeout_s=10)
        assert time.monotonic() - killed_at < 5
        assert BookieRegistry(observer).list() == []
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)
        observer.close()


def test_same_bookie_id_twice_is_refused_on_embedded(sqlite_uri: str) -> None:
    a, b = open_store(sqlite_uri), open_store(sqlite_uri)
    try:
        BookieRegistry(a).register(BookieInfo("dup", "127.0.0.1:1"))
        with pytest.raises(Exception, match="another live owner"):
            BookieRegistry(b).register(BookieInfo("dup", "127.0.0.1:2"))
    finally:
        a.close()
        b.close()


def test_racks_in_registrations_and_older_and_newer_readers() -> None:
    """The rack (issue 29) rides in the registration JSON: normalised, checked, and invisible to
    an older reader (unknown fields ignored), as newer fields are to this one."""
    import json

    from metadata import CorruptMetadataError, InvalidMetadataError

    info = BookieInfo("b1", "127.0.0.1:1", rack="/eu-west-1a/rack-07")
    assert info.rack == "eu-west-1a/rack-07"
    raw = json.loads(info.to_bytes())
    assert raw["rack"] == "eu-west-1a/rack-07"
    assert BookieInfo.from_bytes("b1", info.to_bytes()) == info
    older = json.dumps({k: v for k, v in raw.items() if k != "rack"}).encode()  # written before racks
    assert BookieInfo.from_bytes("b1", older).rack == ""
    newer = json.dumps({**raw, "disks": 3}).encode()
    assert BookieInfo.from_bytes("b1", newer) == info
    with pytest.raises(InvalidMetadataError, match="bad rack"):
        BookieInfo("b1", "127.0.0.1:1", rack="a/b/c")
    with pytest.raises(CorruptMetadataError, match="bookie b1: unreadable registration"):
        BookieInfo.from_bytes("b1", json.dumps({**raw, "rack": "a b"}).encode())


def test_a_read_only_flip_is_logged_at_info(store: MetadataStore, caplog: pytest.LogCaptureFixture) -> None:
    """Routine for the registry: the bookie's storage warns when it turns read-only (and why)."""
    reg = BookieRegistry(store).register(BookieInfo("bookie-1", "127.0.0.1:3181"))
    try:
        with caplog.at_level(logging.INFO, logger="metadata.registry"):
            reg.set_read_only(True)
            reg.set_read_only(False)
        flips = [(r.levelname, r.getMessage()) for r in caplog.records if "read_only=" in r.getMessage()]
        assert flips == [("INFO", "bookie state changed bookie=bookie-1 read_only=True"),
                         ("INFO", "bookie state changed bookie=bookie-1 read_only=False")], flips
    finally:
        reg.close()
