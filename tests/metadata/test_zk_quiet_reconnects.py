"""ZooKeeper down: one line at WARNING, then the clean error (issue 35 item 4).

kazoo logs every failed reconnect attempt at WARNING ("Connection dropped: socket connection
error", "Connection time-out", "Transition to CONNECTING"): a dozen lines before a call gives up.
The store gives them to INFO (metadata/zk_session.py) and says once that the connection is lost.
Logging is left as an application that configured nothing has it (root at WARNING), which is
where kazoo's lines reached the terminal through logging's last-resort handler.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from metadata import MetadataUnavailableError, open_store
from pyspark_ledger.testing.zookeeper_server import LocalZooKeeper

# Short deadlines: the call gives up after a few of kazoo's reconnect attempts, not ten seconds.
PARAMS = "?session_timeout_ms=4000&connect_timeout_ms=3000&op_timeout_ms=3000"


@pytest.fixture
def zk(tmp_path: Path) -> Iterator[LocalZooKeeper]:
    """A ZooKeeper of this test's own: the test stops it."""
    server = LocalZooKeeper(tmp_path / "zk").start()
    try:
        yield server
    finally:
        server.close()


def loud(records: list[logging.LogRecord]) -> list[str]:
    return [f"{r.levelname} {r.name} {r.getMessage()}" for r in records if r.levelno >= logging.WARNING]


def test_a_store_whose_zookeeper_stops_warns_once_then_raises(zk: LocalZooKeeper, caplog: pytest.LogCaptureFixture) -> None:
    store = open_store(zk.uri("/quiet") + PARAMS)
    try:
        store.create("/x", b"1")
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            zk.stop()
            time.sleep(2.0)  # kazoo notices and retries a few times before the call
            with pytest.raises(MetadataUnavailableError):
                store.get("/x")
        lines = loud(caplog.records)
        assert len(lines) == 1, "\n".join(lines)
        assert "ZooKeeper connection lost" in lines[0]
    finally:
        store.close()


def test_kazoo_reconnect_attempts_are_kept_at_info(zk: LocalZooKeeper, caplog: pytest.LogCaptureFixture) -> None:
    """Demoted, not lost: with INFO on, the attempts are there, and none at WARNING."""
    store = open_store(zk.uri("/quiet-info") + PARAMS)
    try:
        with caplog.at_level(logging.INFO):
            zk.stop()
            with pytest.raises(MetadataUnavailableError):
                store.get("/")
        kazoo = [r for r in caplog.records if r.name.startswith("kazoo")]
        assert any(r.getMessage().startswith(("Connection dropped", "Connection time-out")) for r in kazoo), \
            [r.getMessage() for r in kazoo]
        assert all(r.levelno < logging.WARNING for r in kazoo), [f"{r.levelname} {r.getMessage()}" for r in kazoo]
    finally:
        store.close()


def test_connecting_to_a_stopped_zookeeper_warns_once_then_raises(zk: LocalZooKeeper,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    uri = zk.uri("/quiet-start") + PARAMS
    zk.stop()
    with caplog.at_level(logging.WARNING), pytest.raises(MetadataUnavailableError, match="could not connect"):
        open_store(uri)
    lines = loud(caplog.records)
    assert len(lines) == 1, "\n".join(lines)
    assert "ZooKeeper not reachable" in lines[0]
