"""The scrubber (bookie/scrubber.py, storage side bookie/storage/engine_scrub.py) on a real
storage engine: bytes flipped on disk in chosen entries are found, exactly those, in one pass;
each is handed to the repair callback, and a repaired copy (a recovery add of the good bytes)
reads back. A planted scrubber that skips verification is caught."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from bookie.scrubber import Scrubber, ScrubSettings
from bookie.status import Status
from bookie.storage import BookieStorage
from bookie.storage.engine_scrub import ScrubWindow
from bookie.storage.ledger_index import unpack_location
from bookie.storage.records import ENTRY_HEADER_BYTES
from tests.bookie.test_storage_support import add, add_ids, entry_log_files, open_engine, payload, read_all_ok

LEDGERS = [(0, 1), (0, 2), (7, 3)]
ENTRIES = 300
SIZE = 2048


def flip_byte_of(engine: BookieStorage, data_dir: Path, ledger: tuple[int, int], entry_id: int) -> None:
    """Flip one byte of the entry's data in its entry log file (as a failing disk would)."""
    loc, length = engine._ledgers[ledger].index.get(entry_id)
    log_id, offset = unpack_location(loc)
    path = data_dir / "entries" / f"{log_id:016x}.log"
    with open(path, "r+b") as f:
        at = offset + ENTRY_HEADER_BYTES + length // 2
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))
        f.flush()
        os.fsync(f.fileno())


def fill(engine: BookieStorage) -> None:
    for ledger in LEDGERS:
        assert add_ids(engine, ledger, range(ENTRIES), size=SIZE) == Status.OK


def test_one_pass_finds_exactly_the_damaged_copies_and_repairs_them(tmp_path: Path) -> None:
    data = tmp_path / "data"
    engine = open_engine(data, entry_log_max_bytes=512 * 1024)  # several logs
    try:
        fill(engine)
        engine.checkpoint()
        rng = random.Random(1802)
        damaged = {(lg, e) for lg in LEDGERS for e in rng.sample(range(ENTRIES), ENTRIES // 100 + 2)}
        for ledger, entry_id in sorted(damaged):
            flip_byte_of(engine, data, ledger, entry_id)
        assert len(entry_log_files(data)) > 1
        reported: set[tuple[tuple[int, int], int]] = set()

        def repair(ledger: tuple[int, int], ids: list[int]) -> int:
            reported.update((ledger, e) for e in ids)
            for e in ids:  # the peer's good copy, written back as a recovery add
                assert add(engine, ledger, [(e, -1, payload(ledger, e, SIZE))], recovery=True) == Status.OK
            return len(ids)

        result = Scrubber(engine, repair, ScrubSettings(interval_s=0, rate_bytes_s=0)).run_now()
        assert reported == damaged
        assert (result["damaged"], result["repaired"]) == (len(damaged), len(damaged))
        assert result["scrubbed_entries_total"] == len(LEDGERS) * ENTRIES
        for ledger in LEDGERS:
            read_all_ok(engine, ledger, range(ENTRIES), size=SIZE)
        again = Scrubber(engine, repair, ScrubSettings(interval_s=0, rate_bytes_s=0)).run_now()
        assert again["damaged"] == 0
    finally:
        engine.close()
    reopened = open_engine(data, entry_log_max_bytes=512 * 1024)
    try:
        for ledger in LEDGERS:
            read_all_ok(reopened, ledger, range(ENTRIES), size=SIZE)  # the repairs are durable
    finally:
        reopened.close()


def test_a_damaged_copy_is_never_answered_as_absent(tmp_path: Path) -> None:
    engine = open_engine(tmp_path / "data")
    try:
        assert add_ids(engine, LEDGERS[0], range(10), size=SIZE) == Status.OK
        flip_byte_of(engine, tmp_path / "data", LEDGERS[0], 4)
        res = engine.read_entry(LEDGERS[0], 4)
        assert res.status not in (Status.OK, Status.NO_SUCH_ENTRY), res.status
    finally:
        engine.close()


def test_the_scrub_rate_is_bounded(tmp_path: Path) -> None:
    """A pass over ~1.8 MB at 4 MB/s cannot finish in under ~0.45 s; without a limit it does."""
    import time

    engine = open_engine(tmp_path / "data")
    try:
        fill(engine)
        started = time.monotonic()
        Scrubber(engine, lambda lg, ids: 0, ScrubSettings(interval_s=0, rate_bytes_s=4e6)).run_now()
        assert time.monotonic() - started >= 0.9 * len(LEDGERS) * ENTRIES * SIZE / 4e6
    finally:
        engine.close()


def test_a_planted_scrubber_that_does_not_verify_is_caught(tmp_path: Path, monkeypatch) -> None:
    """The same check as the first test, with storage.scrub_window planted to drop what it found:
    the check fails (the damaged copy is never reported)."""
    data = tmp_path / "data"
    engine = open_engine(data)
    try:
        fill(engine)
        flip_byte_of(engine, data, LEDGERS[1], 17)
        real = engine.scrub_window

        def unverified(ledger: tuple[int, int], first: int, max_bytes: int) -> ScrubWindow:
            w = real(ledger, first, max_bytes)
            return ScrubWindow(w.next_first, [], w.bytes_read, w.entries_checked)

        monkeypatch.setattr(engine, "scrub_window", unverified)
        reported: list[tuple[tuple[int, int], int]] = []
        Scrubber(engine, lambda lg, ids: reported.extend((lg, e) for e in ids) or 0,
                 ScrubSettings(interval_s=0, rate_bytes_s=0)).run_now()
        with pytest.raises(AssertionError):
            assert reported == [(LEDGERS[1], 17)]
    finally:
        engine.close()
