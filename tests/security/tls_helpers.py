"""Shared by the TLS tests: a bookie data dir's exact contents, and the bookies' add addresses."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from metadata import BookieRegistry, open_store
from pyspark_ledger.testing.local_cluster import LocalCluster

SETTLE_S = 0.25  # two snapshots this far apart and equal: nothing is still being written
SETTLE_TRIES_MAX = 240  # a minute of writing at most before the snapshot is taken as it stands


def disk_snapshot(cluster: LocalCluster) -> dict[str, str]:
    """Every file under every bookie's data dir, by path, with its SHA-256, once the disks have
    settled: equal snapshots mean not one byte changed on disk. A bookie writes its entry log
    after it acknowledged the journal, so a snapshot taken right after an add may catch that
    write half done (seen on a loaded machine); a change still in progress settles into view."""
    last = _snapshot(cluster)
    for _ in range(SETTLE_TRIES_MAX):
        time.sleep(SETTLE_S)
        now = _snapshot(cluster)
        if now == last:
            return now
        last = now
    return last


def _snapshot(cluster: LocalCluster) -> dict[str, str]:
    out: dict[str, str] = {}
    for b in cluster.bookies:
        for path in sorted(Path(b.data_dir).rglob("*")):
            if path.is_file():
                out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def add_addresses(cluster: LocalCluster) -> dict[str, str]:
    """bookie id -> the add listener's registered host:port."""
    with open_store(cluster.metadata_uri) as store:
        registry = BookieRegistry(store)
        out = {}
        for b in cluster.bookies:
            info = registry.get(b.bookie_id)
            assert info is not None and info.add_address, f"bookie {b.bookie_id} registered no add listener"
            out[b.bookie_id] = info.add_address
        return out
