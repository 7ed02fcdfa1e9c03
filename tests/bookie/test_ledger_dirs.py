"""A journal directory and several ledger directories (issue 29 item 4), in-process: entry logs
spread over the ledger directories with ids unique across them, a full directory takes no new log,
ENOSPC moves the append to another directory, a wiped directory's entries answer
UNKNOWN_ENTRY_STATE and its ledgers are reported lost; the flags, the config file and the
cookies that go with it. The real-process acceptance is in test_ledger_dirs_processes.py."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path
from typing import Any

import pytest

from bookie.config import ConfigError, build_parser, config_from_args
from bookie.cookie import COOKIE_FILE, CookieMismatchError, verify_or_create_cookie
from bookie.status import Status
from bookie.storage import BookieStorage, StorageConfig
from bookie.storage import entry_log as entry_log_module
from bookie.storage.ledger_index import unpack_location
from metadata import open_store
from tests.bookie.test_storage_support import add_ids, read_all_ok

LOG_MAX = 64 * 1024
ENTRY = 1000
PER_LEDGER = 40  # 40 KB per ledger: each ledger spans about one log


def open_dirs(tmp_path: Path, **overrides: Any) -> BookieStorage:
    cfg = StorageConfig(data_dir=tmp_path / "journal", ledger_dirs=(tmp_path / "l1", tmp_path / "l2"),
                        checkpoint_interval_s=0.0, entry_log_max_bytes=LOG_MAX, **overrides)
    return BookieStorage.open(cfg)


def logs_in(directory: Path) -> set[int]:
    return {int(p.stem, 16) for p in (directory / "entries").glob("*.log")}


def write_ledgers(engine: BookieStorage, count: int) -> list[tuple[int, int]]:
    ledgers = [(0, i) for i in range(1, count + 1)]
    for lg in ledgers:
        assert add_ids(engine, lg, range(PER_LEDGER), size=ENTRY) == Status.OK
    return ledgers


def test_entry_logs_spread_over_the_ledger_dirs_with_unique_ids(tmp_path: Path) -> None:
    engine = open_dirs(tmp_path)
    try:
        ledgers = write_ledgers(engine, 6)
    finally:
        engine.close()
    one, two = logs_in(tmp_path / "l1"), logs_in(tmp_path / "l2")
    assert len(one) >= 2 and len(two) >= 2, (one, two)  # round robin: both directories used
    assert not one & two  # an id names one log, wherever it is
    assert not (tmp_path / "journal" / "entries").exists()  # the journal directory holds no entry log
    assert list((tmp_path / "journal" / "journal").glob("*.log"))
    reopened = open_dirs(tmp_path)
    try:
        for lg in ledgers:
            read_all_ok(reopened, lg, range(PER_LEDGER), size=ENTRY)
        assert reopened.lost_ledgers() == {}
    finally:
        reopened.close()


def test_a_full_ledger_dir_takes_no_new_log_and_all_full_is_all(tmp_path: Path) -> None:
    engine = open_dirs(tmp_path)
    try:
        engine.set_ledger_dir_full(tmp_path / "l1", True)
        assert not engine.ledger_dirs_all_full()
        before = logs_in(tmp_path / "l1")
        ledgers = write_ledgers(engine, 4)
        assert logs_in(tmp_path / "l1") == before  # every new log went to l2
        assert len(logs_in(tmp_path / "l2")) >= 3
        engine.set_ledger_dir_full(tmp_path / "l2", True)
        assert engine.ledger_dirs_all_full()
        engine.set_ledger_dir_full(tmp_path / "l1", False)
        assert not engine.ledger_dirs_all_full()
        for lg in ledgers:
            read_all_ok(engine, lg, range(PER_LEDGER), size=ENTRY)
    finally:
        engine.close()


def test_enospc_in_one_ledger_dir_moves_the_append_to_the_other(tmp_path: Path, monkeypatch: Any) -> None:
    engine = open_dirs(tmp_path)
    told: list[Path] = []
    engine.on_ledger_dir_full(told.append)
    real = entry_log_module.pwritev_all
    l1_entries = tmp_path / "l1" / "entries"

    def no_space_in_l1(fd: int, parts: Any, offset: int) -> int:
        if Path(f"/proc/self/fd/{fd}").resolve().parent == l1_entries.resolve():
            raise OSError(errno.ENOSPC, "No space left on device (test)")
        return real(fd, parts, offset)

    try:
        monkeypatch.setattr(entry_log_module, "pwritev_all", no_space_in_l1)
        ledgers = write_ledgers(engine, 3)
        assert told == [tmp_path / "l1"]
        assert not engine.read_only and not engine.journal_failed
        monkeypatch.setattr(entry_log_module, "pwritev_all", real)
        for lg in ledgers:
            read_all_ok(engine, lg, range(PER_LEDGER), size=ENTRY)
        assert all(unpack_location(engine._ledgers[lg].index.get(0)[0])[0] not in logs_in(tmp_path / "l1")
                   for lg in ledgers)
    finally:
        engine.close()


def test_a_wiped_ledger_dir_answers_unknown_and_reports_its_ledgers(tmp_path: Path) -> None:
    engine = open_dirs(tmp_path)
    try:
        ledgers = write_ledgers(engine, 6)
        where = {lg: {unpack_location(loc)[0] for _, loc, _ in engine._ledgers[lg].index.items()} for lg in ledgers}
    finally:
        engine.close()
    wiped = logs_in(tmp_path / "l2")
    highest = max(wiped | logs_in(tmp_path / "l1"))
    shutil.rmtree(tmp_path / "l2")
    expected = {lg: sum(1 for e in range(PER_LEDGER) if unpack_location(engine_loc(tmp_path, lg, e))[0] in wiped)
                for lg in ledgers if where[lg] & wiped}
    assert expected and len(expected) < len(ledgers)  # some ledgers lost entries, some did not

    for _ in range(2):  # the index keeps knowing: a second restart reports the same
        reopened = open_dirs(tmp_path)
        try:
            assert reopened.lost_ledgers() == expected
            for lg in ledgers:
                statuses = {reopened.read_entry(lg, e).status for e in range(PER_LEDGER)}
                if lg in expected:
                    assert Status.UNKNOWN_ENTRY_STATE in statuses and Status.NO_SUCH_ENTRY not in statuses
                else:
                    read_all_ok(reopened, lg, range(PER_LEDGER), size=ENTRY)
            # New logs never reuse a lost id: the lost entries stay unknown, never become others.
            assert add_ids(reopened, (0, 99), range(PER_LEDGER), size=ENTRY) == Status.OK
            assert min(logs_in(tmp_path / "l1") | logs_in(tmp_path / "l2")) > 0
            assert not (logs_in(tmp_path / "l2") & wiped)
            assert all(i > highest for i in logs_in(tmp_path / "l2"))
        finally:
            reopened.close()


def engine_loc(tmp_path: Path, lg: tuple[int, int], entry_id: int) -> int:
    """The stored location of an entry, read from the durable index (the engine is closed)."""
    from bookie.storage.checkpoint import load_ledger_snapshots
    from bookie.storage.index_store import IndexStore

    store = IndexStore(tmp_path / "journal" / "ledgers", fsync=False)
    try:
        for loaded in load_ledger_snapshots(store, tmp_path / "journal" / "ledgers", False):
            if loaded.key == lg:
                got = loaded.meta.index.get(entry_id)
                assert got is not None
                return got[0]
    finally:
        store.close()
    raise AssertionError(f"ledger {lg} not in the index")


def test_journaled_entries_survive_a_wiped_ledger_dir(tmp_path: Path) -> None:
    """Entries not yet checkpointed are re-appended from the journal at open: not lost."""
    engine = open_dirs(tmp_path)
    lg = (0, 7)
    assert add_ids(engine, lg, range(20), size=ENTRY) == Status.OK
    crashed = tmp_path / "crashed"
    shutil.copytree(tmp_path, crashed, ignore=shutil.ignore_patterns("crashed"))  # a kill -9, no checkpoint since
    engine.close()
    shutil.rmtree(crashed / "l1")
    shutil.rmtree(crashed / "l2")
    reopened = open_dirs(crashed)
    try:
        assert reopened.lost_ledgers() == {}
        read_all_ok(reopened, lg, range(20), size=ENTRY)
    finally:
        reopened.close()


# ---- flags and the config file ---------------------------------------------------------------------


def parse(*argv: str) -> Any:
    return config_from_args(build_parser().parse_args(["--metadata-uri", "sqlite:///tmp/x.db", *argv]))


def test_flags_journal_dir_and_ledger_dirs_need_no_data_dir(tmp_path: Path) -> None:
    cfg = parse("--journal-dir", str(tmp_path / "j"), "--ledger-dirs", f"{tmp_path / 'a'},{tmp_path / 'b'}")
    assert cfg.journal_directory == tmp_path / "j"
    assert cfg.ledger_directories == (tmp_path / "a", tmp_path / "b")
    only = parse("--data-dir", str(tmp_path / "d"))
    assert (only.journal_directory, only.ledger_directories) == (tmp_path / "d", (tmp_path / "d",))
    mixed = parse("--data-dir", str(tmp_path / "d"), "--journal-dir", str(tmp_path / "j"))
    assert (mixed.journal_directory, mixed.ledger_directories) == (tmp_path / "j", (tmp_path / "d",))


@pytest.mark.parametrize("argv, says", [
    (["--journal-dir", "/j"], "--data-dir is required"),
    (["--ledger-dirs", "/a,/b"], "--data-dir is required"),
    (["--journal-dir", "/j", "--ledger-dirs", "/a,/a"], "names a directory twice"),
])
def test_bad_directory_flags_are_named(argv: list[str], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        parse(*argv)


def test_ledger_dirs_in_the_config_file_is_a_list(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text(f'journal_dir = "{tmp_path / "j"}"\nledger_dirs = ["{tmp_path / "a"}", "{tmp_path / "b"}"]\n')
    cfg = parse("--config", str(good))
    assert cfg.ledger_directories == (tmp_path / "a", tmp_path / "b") and cfg.data_dir is None
    bad = tmp_path / "bad.toml"
    bad.write_text(f'journal_dir = "{tmp_path / "j"}"\nledger_dirs = "{tmp_path / "a"}"\n')
    with pytest.raises(ConfigError, match="ledger_dirs must be an array of strings"):
        parse("--config", str(bad))


# ---- cookies ---------------------------------------------------------------------------------------


def test_cookies_adopt_an_empty_ledger_dir_and_refuse_the_rest(tmp_path: Path) -> None:
    store = open_store(f"sqlite://{tmp_path / 'meta.db'}")
    j, a, b = (tmp_path / n for n in ("j", "a", "b"))
    for d in (j, a, b):
        d.mkdir()
    try:
        first = verify_or_create_cookie(store, "b1", j, [a, b])
        assert all((d / COOKIE_FILE).exists() for d in (j, a, b))
        shutil.rmtree(b)  # a wiped disk, mounted again empty
        b.mkdir()
        (b / "lost+found").mkdir()
        assert verify_or_create_cookie(store, "b1", j, [a, b]).instance_id == first.instance_id
        assert (b / COOKIE_FILE).exists()  # adopted
        (a / COOKIE_FILE).unlink()  # a ledger dir that still holds data but lost its cookie
        (a / "entries").mkdir()
        (a / "entries" / "0000000000000001.log").write_bytes(b"x")
        with pytest.raises(CookieMismatchError, match="have no cookie"):
            verify_or_create_cookie(store, "b1", j, [a, b])
        (a / "entries" / "0000000000000001.log").unlink()
        verify_or_create_cookie(store, "b1", j, [a, b])
        (j / COOKIE_FILE).unlink()  # the journal directory (and the index with it) is never adopted
        with pytest.raises(CookieMismatchError, match="have no cookie"):
            verify_or_create_cookie(store, "b1", j, [a, b])
    finally:
        store.close()


def test_a_failed_ledger_dir_is_left_out_and_its_entries_are_unknown(tmp_path: Path) -> None:
    """A directory that cannot be used at open (here a file where it was) is left out: the
    engine opens on the other one, and what the index places there is lost, never absent."""
    engine = open_dirs(tmp_path)
    try:
        ledgers = write_ledgers(engine, 6)
    finally:
        engine.close()
    shutil.rmtree(tmp_path / "l1")
    (tmp_path / "l1").write_bytes(b"not a directory")
    reopened = open_dirs(tmp_path)
    try:
        lost = reopened.lost_ledgers()
        assert lost and set(lost) <= set(ledgers)
        for lg in lost:
            statuses = {reopened.read_entry(lg, e).status for e in range(PER_LEDGER)}
            assert Status.UNKNOWN_ENTRY_STATE in statuses and Status.NO_SUCH_ENTRY not in statuses
        assert add_ids(reopened, (0, 99), range(PER_LEDGER), size=ENTRY) == Status.OK  # into l2
        read_all_ok(reopened, (0, 99), range(PER_LEDGER), size=ENTRY)
    finally:
        reopened.close()
