"""Helpers shared by the storage engine tests (no tests here).

Kept under the test_storage_* name because that is the namespace the storage tests own."""

from __future__ import annotations

import os
import random
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bookie.status import Status
from bookie.storage import BookieStorage, StorageConfig

KEY = b"k" * 20
OTHER_KEY = b"x" * 20
# Every test wait is bounded by this.
WAIT_S = 10.0
SEED_ENV = "STORAGE_TEST_SEED"


def seeded_rng(test_name: str) -> tuple[random.Random, int]:
    """A seeded RNG; replay a failure with STORAGE_TEST_SEED=<printed seed>."""
    seed = int(os.environ.get(SEED_ENV, random.randrange(2**32)))
    print(f"{test_name}: seed={seed} (replay with {SEED_ENV}={seed})")
    return random.Random(seed), seed


def config(data_dir: Path, **overrides: Any) -> StorageConfig:
    defaults: dict[str, Any] = dict(checkpoint_interval_s=0.0)
    defaults.update(overrides)
    return StorageConfig(data_dir=data_dir, **defaults)


def open_engine(data_dir: Path, **overrides: Any) -> BookieStorage:
    return BookieStorage.open(config(data_dir, **overrides))


def payload(ledger: tuple[int, int], entry_id: int, size: int | None = None) -> bytes:
    """Deterministic, entry-specific bytes, so a read of the wrong entry is caught."""
    seed = f"{ledger[0]:x}/{ledger[1]:x}/{entry_id}|".encode()
    n = size if size is not None else 1 + (entry_id * 37 + ledger[1]) % 300
    return (seed * (n // len(seed) + 1))[:n]


def add(engine: BookieStorage, ledger: tuple[int, int], entries: Sequence[tuple[int, int, bytes]],
        key: bytes = KEY, recovery: bool = False) -> Status:
    """add_batch and wait for its callback."""
    done = threading.Event()
    result: list[Status] = []

    def on_done(status: Status) -> None:
        result.append(status)
        done.set()

    engine.add_batch(ledger, key, entries, recovery, on_done)
    assert done.wait(WAIT_S), "add_batch callback never came"
    return result[0]


def add_ids(engine: BookieStorage, ledger: tuple[int, int], ids: Sequence[int],
            key: bytes = KEY, size: int | None = None, recovery: bool = False) -> Status:
    return add(engine, ledger, [(e, e - 1, payload(ledger, e, size)) for e in ids], key, recovery)


def read_all_ok(engine: BookieStorage, ledger: tuple[int, int], ids: Sequence[int],
                size: int | None = None) -> None:
    for e in ids:
        r = engine.read_entry(ledger, e)
        assert r.status == Status.OK, (ledger, e, r.status)
        assert r.data == payload(ledger, e, size), (ledger, e)


def crash_copy(src: Path, dst: Path) -> Path:
    """What a kill -9 would leave on disk right now: the files as the page cache has them.
    Only meaningful while the engine is quiescent (no add or checkpoint in progress)."""
    shutil.copytree(src, dst)
    return dst


def journal_files(data_dir: Path) -> list[Path]:
    return sorted((data_dir / "journal").glob("*.log"))


def entry_log_files(data_dir: Path) -> list[Path]:
    return sorted((data_dir / "entries").glob("*.log"))
