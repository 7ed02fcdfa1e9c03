"""Shared by the TLS tests: a bookie data dir's exact contents, and the bookies' add addresses."""

from __future__ import annotations

import hashlib
from pathlib import Path

from metadata import BookieRegistry, open_store
from pyspark_ledger.testing.local_cluster import LocalCluster


def disk_snapshot(cluster: LocalCluster) -> dict[str, str]:
    """Every file under every bookie's data dir, by path, with its SHA-256: equal snapshots
    mean not one byte changed on disk."""
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
