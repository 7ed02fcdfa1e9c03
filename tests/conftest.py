"""Shared fixtures: a real ZooKeeper (Debian's package) on loopback, and a store per test on each backend."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from metadata import MetadataStore, open_store
from pyspark_ledger.testing.zookeeper_server import LocalZooKeeper


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalZooKeeper]:
    """One standalone ZooKeeper for the whole run; tests isolate themselves with their own root."""
    zk = LocalZooKeeper(tmp_path_factory.mktemp("zookeeper"))
    zk.start()
    try:
        yield zk
    finally:
        zk.stop()


@pytest.fixture
def zk_uri(zk_server: LocalZooKeeper, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh root (chroot) per test; the server log is printed if the test failed."""
    yield zk_server.uri(f"/test-{uuid.uuid4().hex[:12]}")
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print("---- ZooKeeper log (tail) ----\n" + zk_server.tail_log())


@pytest.fixture
def sqlite_uri(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path / 'metadata.db'}"


@pytest.fixture(params=["sqlite", "zk"])
def store_uri(request: pytest.FixtureRequest) -> str:
    """Each test using this runs against both stores."""
    if request.param == "zk":
        return request.getfixturevalue("zk_uri")
    return request.getfixturevalue("sqlite_uri")


@pytest.fixture
def store(store_uri: str) -> Iterator[MetadataStore]:
    s = open_store(store_uri)
    try:
        yield s
    finally:
        s.close()
