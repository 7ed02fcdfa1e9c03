"""Spark tests share ONE SparkSession (local[2,4]: two cores, and up to 4 attempts per task so
retries happen) and one LocalCluster of three real bookies on the embedded store.

SparkSession start costs ~6.5 s on this machine; every test uses its own log names instead of
its own session or cluster.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import pyspark  # a dependency: the test command installs it, so Spark tests always run
import pytest

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.local_cluster import LocalCluster, local_spark_session


@pytest.fixture(scope="session")
def ledger_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(3, work_dir=tmp_path_factory.mktemp("spark-cluster"))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="session")
def uri(ledger_cluster: LocalCluster) -> str:
    return ledger_cluster.metadata_uri


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


@pytest.fixture
def client(uri: str) -> Iterator[LedgerClient]:
    with LedgerClient(uri) as c:
        yield c


@pytest.fixture
def log_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def ledger_opts(uri: str, name: str, **extra: object) -> dict[str, str]:
    return {"metadataServiceUri": uri, "log": name, **{k: str(v) for k, v in extra.items()}}

