"""Fault-suite fixtures: real bookies behind proxies on a real ZooKeeper."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

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


# How a bookie's full disk is met: "threshold" turns it read-only at 90% used (the disk monitor,
# before anything fails); "enospc" leaves the monitor at 100%, so writes really fail with ENOSPC.
DISK_THRESHOLDS = {
    "threshold": ["--disk-usage-threshold", "0.9", "--disk-usage-lwm-threshold", "0.8"],
    "enospc": ["--disk-usage-threshold", "1.0", "--disk-usage-lwm-threshold", "0.99"],
}


@pytest.fixture(params=sorted(DISK_THRESHOLDS))
def small_fs_cluster(zk_uri: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[FaultCluster]:
    """Bookies each on a tmpfs of SMALL_FS_BYTES; request.param says how a full disk is met."""
    try:
        fc = start_fault_cluster(zk_uri, tmp_path / "cluster", 4, small_fs_bytes=SMALL_FS_BYTES,
                                 bookie_args=DISK_THRESHOLDS[request.param])
    except FaultUnavailable as exc:
        pytest.skip(f"no small file system on this machine: {exc}")
    fc.disk_mode = request.param
    try:
        yield fc
    finally:
        fc.close()
