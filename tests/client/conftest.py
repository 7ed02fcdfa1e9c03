"""Client tests run real `bookie` processes against a real ZooKeeper and the embedded store."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.local_cluster import LocalCluster


@pytest.fixture
def make_cluster(store_uri: str, tmp_path: Path) -> Iterator[Callable[..., LocalCluster]]:
    """Start a LocalCluster of real bookie processes on the parametrized metadata store."""
    clusters: list[LocalCluster] = []

    def make(num_bookies: int = 3, **kw: object) -> LocalCluster:
        c = LocalCluster(num_bookies, metadata_uri=store_uri, work_dir=tmp_path / f"cluster{len(clusters)}", **kw)
        clusters.append(c)
        return c.start()

    yield make
    for c in clusters:
        c.close()


@pytest.fixture
def cluster3(make_cluster: Callable[..., LocalCluster]) -> LocalCluster:
    return make_cluster(3)


@pytest.fixture
def client(cluster3: LocalCluster) -> Iterator[LedgerClient]:
    with LedgerClient(cluster3.metadata_uri, add_timeout_s=5) as c:
        yield c
