"""Shared fixtures: a real ZooKeeper (Debian's package) on loopback, a store per test on each
backend, and the one SparkSession of a test process (a process holds one SparkContext: a test
that made and stopped a session of its own stopped the shared one's context too, which under
pytest-xdist could be another file's)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyspark  # a dependency: the test command installs it, so Spark tests always run
import pytest

from metadata import MetadataStore, open_store
from pyspark_ledger.testing.local_cluster import local_spark_session
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


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[pyspark.sql.SparkSession]:
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = local_spark_session(
        "pyspark-ledger-tests", master="local[2,4]",  # [cores, max failures per task]: retries happen
        log_level="ERROR", conf={"spark.default.parallelism": "2", "spark.sql.warehouse.dir": str(warehouse)},
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        yield session
    finally:
        session.stop()
