"""The bookie's index store (one SQLite file per bookie instead of one file per ledger): a
checkpoint writes its dirty ledgers in one transaction, and a data directory written with
per-ledger files is migrated on open, also after a crash in the middle of the migration."""

from __future__ import annotations

import shutil
from pathlib import Path

from bookie.status import Status
from bookie.storage import BookieStorage
from bookie.storage.checkpoint import ledger_file_path
from bookie.storage.index_store import STORE_NAME, IndexStore
from tests.bookie.test_storage_support import KEY, add_ids, open_engine, read_all_ok

LEDGERS = [(0, n) for n in range(1, 41)]
FENCED = LEDGERS[0]


def _write(data_dir: Path) -> None:
    engine = open_engine(data_dir)
    for lg in LEDGERS:
        assert add_ids(engine, lg, range(5)) == Status.OK
    assert engine.fence(FENCED, KEY)[0] == Status.OK
    engine.close()


def _check(engine: BookieStorage) -> None:
    """Every ledger reads back, and the ledger states (fence bit, LAC, count) survived."""
    for lg in LEDGERS:
        read_all_ok(engine, lg, range(5))
        state = engine.ledger_state(lg)
        assert state is not None and state.entry_count == 5 and state.lac == 3 and state.has_master_key
        assert state.fenced == (lg == FENCED)


def _as_legacy_files(data_dir: Path, keep_store: bool) -> list[Path]:
    """Turn the store's rows back into the first design's per-ledger files."""
    ledgers_dir = data_dir / "ledgers"
    store = IndexStore(ledgers_dir, fsync=False)
    files = []
    for key, body in store.rows():
        path = ledger_file_path(ledgers_dir, key)
        path.write_bytes(body)
        files.append(path)
    store.close()
    if not keep_store:
        for p in ledgers_dir.glob(STORE_NAME + "*"):
            p.unlink()
    return files


def test_a_checkpoint_keeps_every_ledger_in_one_store_file(tmp_path: Path) -> None:
    _write(tmp_path / "d")
    ledgers_dir = tmp_path / "d" / "ledgers"
    assert not list(ledgers_dir.glob("*.ldg"))
    store = IndexStore(ledgers_dir, fsync=False)
    assert sorted(key for key, _ in store.rows()) == LEDGERS
    store.close()
    engine = open_engine(tmp_path / "d")
    _check(engine)
    engine.close()


def test_per_ledger_files_are_migrated_on_open(tmp_path: Path) -> None:
    _write(tmp_path / "d")
    files = _as_legacy_files(tmp_path / "d", keep_store=False)
    assert len(files) == len(LEDGERS)
    engine = open_engine(tmp_path / "d")
    _check(engine)
    assert add_ids(engine, LEDGERS[3], range(5, 8)) == Status.OK
    engine.close()
    assert not any(p.exists() for p in files), "migrated files are deleted"
    engine = open_engine(tmp_path / "d")
    read_all_ok(engine, LEDGERS[3], range(8))
    engine.close()


def test_a_crash_during_the_migration_leaves_nothing_to_lose(tmp_path: Path) -> None:
    """Files and rows both present (the crash came after the commit, before every file was
    deleted): the open migrates them again, identical, and carries on."""
    _write(tmp_path / "d")
    backup = tmp_path / "files"
    files = _as_legacy_files(tmp_path / "d", keep_store=True)
    backup.mkdir()
    for p in files[: len(files) // 2]:  # half were deleted before the crash
        shutil.move(p, backup / p.name)
    engine = open_engine(tmp_path / "d")
    _check(engine)
    engine.close()
    assert not list((tmp_path / "d" / "ledgers").glob("*.ldg"))
