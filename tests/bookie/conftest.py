"""Fixtures shared by the bookie tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pyspark_ledger.testing.local_cluster import LocalBookie


@pytest.fixture
def bookie(tmp_path: Path) -> Iterator[LocalBookie]:
    """One real `bookie` process on loopback with embedded (SQLite) metadata."""
    b = LocalBookie(f"sqlite://{tmp_path / 'meta.db'}", tmp_path / "data",
                    extra_args=["--no-verify-ledger-keys"]).start()  # raw ledgers: no metadata
    yield b
    b.stop()
