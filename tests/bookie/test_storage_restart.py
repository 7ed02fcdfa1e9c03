"""Storage engine restarts: clean close, simulated crash (on-disk state copied while the engine
is quiescent, as kill -9 would leave it), crashes in the middle of a checkpoint, journal
trimming, and a seeded random workload checked against a model across many restarts."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from bookie.status import Status
from bookie.storage import BookieStorage
from tests.bookie.test_storage_support import (
    KEY,
    OTHER_KEY,
    add_ids,
    crash_copy,
    entry_log_files,
    journal_files,
    open_engine,
    payload,
    read_all_ok,
    seeded_rng,
)


def populate(engine: BookieStorage) -> None:
    """Ledger A: 0..99 fenced; B: 0..49 with explicit LAC 60; C: deleted; D: fenced unseen."""
    assert add_ids(engine, (1, 0xA), range(100)) == Status.OK
    assert engine.fence((1, 0xA), KEY) == (Status.OK, 98)
    assert add_ids(engine, (2**64 - 1, 0xB), range(50)) == Status.OK
    assert engine.write_lac((2**64 - 1, 0xB), KEY, 60) == Status.OK
    assert add_ids(engine, (0, 0xC), range(10)) == Status.OK
    assert engine.delete_ledger((0, 0xC)) == Status.OK
    assert engine.fence((0, 0xD), OTHER_KEY) == (Status.OK, -1)


def check_populated(engine: BookieStorage) -> None:
    read_all_ok(engine, (1, 0xA), range(100))
    state_a = engine.ledger_state((1, 0xA))
    assert state_a is not None and state_a.fenced and state_a.lac == 98 and state_a.entry_count == 100
    assert add_ids(engine, (1, 0xA), [100]) == Status.FENCED
    assert add_ids(engine, (1, 0xA), [100], key=OTHER_KEY, recovery=True) == Status.UNAUTHORIZED
    read_all_ok(engine, (2**64 - 1, 0xB), range(50))
    assert engine.read_lac((2**64 - 1, 0xB)) == (Status.OK, 60)
    assert engine.fence((2**64 - 1, 0xB), OTHER_KEY)[0] == Status.UNAUTHORIZED
    assert engine.ledger_state((0, 0xC)) is None
    assert engine.read_entry((0, 0xC), 0).status == Status.NO_SUCH_LEDGER
    assert add_ids(engine, (0, 0xC), [10]) == Status.NO_SUCH_LEDGER  # never resurrected
    state_d = engine.ledger_state((0, 0xD))
    assert state_d is not None and state_d.fenced and state_d.entry_count == 0
    assert add_ids(engine, (0, 0xD), [0], key=KEY, recovery=True) == Status.UNAUTHORIZED
    assert sorted(engine.ledgers()) == [(0, 0xD), (1, 0xA), (2**64 - 1, 0xB)]


def test_clean_restart_keeps_entries_fences_lacs_keys_and_deletes(tmp_path: Path) -> None:
    engine = open_engine(tmp_path / "d")
    populate(engine)
    engine.close()
    engine = open_engine(tmp_path / "d")
    try:
        check_populated(engine)
        # The clean close checkpointed: nothing was replayed, one fresh journal file remains.
        assert len(journal_files(tmp_path / "d")) == 1
    finally:
        engine.close()


def test_crash_before_any_checkpoint_replays_the_journal(tmp_path: Path) -> None:
    engine = open_engine(tmp_path / "d")
    try:
        populate(engine)
        crash_copy(tmp_path / "d", tmp_path / "crashed")
    finally:
        engine.close()
    engine = open_engine(tmp_path / "crashed")
    try:
        check_populated(engine)
    finally:
        engine.close()
    engine = open_engine(tmp_path / "crashed")  # and again, from the checkpoint open() wrote
    try:
        check_populated(engine)
    finally:
        engine.close()


def test_crash_after_checkpoint_replays_only_the_rest_and_trims_the_journal(tmp_path: Path) -> None:
    # Small files so the journal and the entry log roll several times.
    engine = open_engine(tmp_path / "d", journal_file_max_bytes=16 * 1024, entry_log_max_bytes=32 * 1024)
    try:
        lg = (0, 1)
        for first in range(0, 600, 50):
            assert add_ids(engine, lg, range(first, first + 50)) == Status.OK
        assert len(journal_files(tmp_path / "d")) > 3
        engine.checkpoint()
        # Everything before the checkpointed position is gone from the journal.
        assert len(journal_files(tmp_path / "d")) == 1
        for first in range(600, 900, 50):
            assert add_ids(engine, lg, range(first, first + 50)) == Status.OK
        assert engine.delete_ledger((0, 1)) == Status.OK
        assert add_ids(engine, (0, 2), range(10)) == Status.OK
        crash_copy(tmp_path / "d", tmp_path / "crashed")
    finally:
        engine.close()
    assert len(entry_log_files(tmp_path / "crashed")) > 3
    engine = open_engine(tmp_path / "crashed", journal_file_max_bytes=16 * 1024,
                         entry_log_max_bytes=32 * 1024)
    try:
        assert engine.ledger_state((0, 1)) is None  # deleted after the checkpoint: stays deleted
        read_all_ok(engine, (0, 2), range(10))
        assert len(journal_files(tmp_path / "crashed")) == 1
    finally:
        engine.close()


def test_crash_in_the_middle_of_a_checkpoint(tmp_path: Path) -> None:
    """Ledger files written, manifest not yet: replay from the old position over newer ledger
    files must be harmless (every record is idempotent)."""
    engine = open_engine(tmp_path / "d")
    try:
        assert add_ids(engine, (0, 1), range(100)) == Status.OK
        engine.checkpoint()
        assert add_ids(engine, (0, 1), range(100, 200)) == Status.OK
        assert engine.fence((0, 1), KEY)[0] == Status.OK
        assert add_ids(engine, (0, 2), range(30)) == Status.OK
        assert engine.delete_ledger((0, 2)) == Status.OK
        assert add_ids(engine, (0, 3), range(5, 25)) == Status.OK
        before = crash_copy(tmp_path / "d", tmp_path / "before")
        engine.checkpoint()
        after = crash_copy(tmp_path / "d", tmp_path / "after")
    finally:
        engine.close()
    hybrid = tmp_path / "hybrid"
    shutil.copytree(before, hybrid)
    shutil.rmtree(hybrid / "ledgers")
    shutil.copytree(after / "ledgers", hybrid / "ledgers")
    shutil.rmtree(hybrid / "entries")
    shutil.copytree(after / "entries", hybrid / "entries")
    for data_dir in (before, after, hybrid):
        engine = open_engine(data_dir)
        try:
            read_all_ok(engine, (0, 1), range(200))
            state = engine.ledger_state((0, 1))
            assert state is not None and state.fenced and state.entry_count == 200
            assert engine.ledger_state((0, 2)) is None
            read_all_ok(engine, (0, 3), range(5, 25))
            assert engine.ledger_state((0, 3)).entry_count == 20
        finally:
            engine.close()


def test_periodic_checkpoint_trims_the_journal(tmp_path: Path) -> None:
    engine = open_engine(tmp_path / "d", checkpoint_interval_s=0.05, journal_file_max_bytes=8 * 1024)
    try:
        for first in range(0, 400, 40):
            assert add_ids(engine, (0, 1), range(first, first + 40)) == Status.OK
        deadline = __import__("time").monotonic() + 5
        while len(journal_files(tmp_path / "d")) > 1 and __import__("time").monotonic() < deadline:
            __import__("time").sleep(0.02)
        assert len(journal_files(tmp_path / "d")) == 1
        assert engine.stats()["checkpoints"] >= 2
    finally:
        engine.close()


@dataclass
class Model:
    entries: dict[tuple[int, int], set[int]] = field(default_factory=dict)
    fenced: set[tuple[int, int]] = field(default_factory=set)
    lac: dict[tuple[int, int], int] = field(default_factory=dict)
    deleted: set[tuple[int, int]] = field(default_factory=set)


def check_model(engine: BookieStorage, model: Model) -> None:
    for lg, ids in model.entries.items():
        if lg in model.deleted:
            assert engine.ledger_state(lg) is None, lg
            continue
        read_all_ok(engine, lg, sorted(ids))
        state = engine.ledger_state(lg)
        assert state is not None and state.entry_count == len(ids), lg
        assert state.fenced == (lg in model.fenced), lg
        assert state.lac == model.lac.get(lg, -1), lg
    assert sorted(engine.ledgers()) == sorted(lg for lg in model.entries if lg not in model.deleted)


def test_random_workload_survives_clean_and_crash_restarts(tmp_path: Path) -> None:
    rng, _ = seeded_rng("test_random_workload_survives_clean_and_crash_restarts")
    opts = dict(journal_file_max_bytes=rng.choice([4096, 64 * 1024]),
                entry_log_max_bytes=rng.choice([8192, 1 << 20]))
    model = Model()
    ledgers = [(rng.randrange(3), rng.randrange(2**64)) for _ in range(6)]
    data_dir = tmp_path / "gen0"
    engine = open_engine(data_dir, **opts)
    try:
        for step in range(150):
            lg = rng.choice(ledgers)
            op = rng.random()
            if op < 0.55:
                have = model.entries.get(lg, set())
                start = max(have, default=-1) + 1 - rng.randint(0, 3)
                ids = [e for e in range(max(start, 0), max(start, 0) + rng.randint(1, 40))
                       if rng.random() < 0.8] or [max(start, 0)]
                recovery = rng.random() < 0.2
                status = add_ids(engine, lg, ids, recovery=recovery)
                if lg in model.deleted:
                    assert status == Status.NO_SUCH_LEDGER
                elif lg in model.fenced and not recovery:
                    assert status == Status.FENCED
                else:
                    assert status == Status.OK
                    model.entries.setdefault(lg, set()).update(ids)
                    model.lac[lg] = max(model.lac.get(lg, -1), max(ids) - 1)
            elif op < 0.65 and lg not in model.deleted:
                status, lac = engine.fence(lg, KEY)
                assert status == Status.OK and lac == model.lac.get(lg, -1)
                model.fenced.add(lg)
                model.entries.setdefault(lg, set())
            elif op < 0.72 and lg not in model.deleted and lg not in model.fenced:
                lac = rng.randint(-1, 200)
                assert engine.write_lac(lg, KEY, lac) == Status.OK
                model.lac[lg] = max(model.lac.get(lg, -1), lac)
                model.entries.setdefault(lg, set())
            elif op < 0.76 and lg in model.entries and lg not in model.deleted:
                assert engine.delete_ledger(lg) == Status.OK
                model.deleted.add(lg)
            elif op < 0.84:
                engine.checkpoint()
            elif op < 0.92:
                engine.close()
                engine = open_engine(data_dir, **opts)
                check_model(engine, model)
            else:
                crashed = tmp_path / f"gen{step + 1}"
                crash_copy(data_dir, crashed)
                engine.close()
                data_dir = crashed
                engine = open_engine(data_dir, **opts)
                check_model(engine, model)
        check_model(engine, model)
    finally:
        engine.close()


def test_payload_helper_is_entry_specific() -> None:
    assert payload((0, 1), 1) != payload((0, 1), 2) and payload((0, 1), 1) != payload((0, 2), 1)
