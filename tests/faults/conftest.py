"""Fault-suite fixtures: real bookies behind proxies on a real ZooKeeper."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from pyspark_ledger.testing.faults import FaultUnavailable
from tests.faults.harness import FaultCluster, start_fault_cluster

SMALL_FS_BYTES = 96 * 2**20


@pytest.fixture
def fault_cluster(zk_uri: str, tmp_path: Path) -> Iterator[FaultCluster]:
    fc = start_fault_cluster(zk_uri, tmp_path / "cluster", 4)
    try:
        yield fc
    finally:
        fc.close()


@pytest.fixture
def small_fs_cluster(zk_uri: str, tmp_path: Path) -> Iterator[FaultCluster]:
    """Bookies each on a tmpfs of SMALL_FS_BYTES, read-only at 90% used, writable again at 80%."""
    try:
        fc = start_fault_cluster(zk_uri, tmp_path / "cluster", 4, small_fs_bytes=SMALL_FS_BYTES,
                                 bookie_args=["--disk-usage-threshold", "0.9", "--disk-usage-lwm-threshold", "0.8"])
    except FaultUnavailable as exc:
        pytest.skip(f"no small file system on this machine: {exc}")
    try:
        yield fc
    finally:
        fc.close()
