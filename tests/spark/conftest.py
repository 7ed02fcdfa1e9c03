"""Spark tests share ONE SparkSession (tests/conftest.py's `spark`: local[2,4], two cores, and up to
4 attempts per task so retries happen) and one LocalCluster of three real bookies on the embedded store.

SparkSession start costs ~6.5 s on this machine; every test uses its own log names instead of
its own session or cluster.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.local_cluster import LocalCluster


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


@pytest.fixture
def client(uri: str) -> Iterator[LedgerClient]:
    with LedgerClient(uri) as c:
        yield c


@pytest.fixture
def log_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def ledger_opts(uri: str, name: str, **extra: object) -> dict[str, str]:
    return {"metadataServiceUri": uri, "log": name, **{k: str(v) for k, v in extra.items()}}

