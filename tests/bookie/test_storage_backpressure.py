"""Bounded pending work (BUSY after the enqueue timeout), draining on close, journal failure."""

from __future__ import annotations

import errno
import threading
import time
from pathlib import Path

import pytest

from bookie.status import Status
from bookie.storage.journal import JournalWriter
from tests.bookie.test_storage_support import KEY, WAIT_S, add_ids, open_engine, payload, read_all_ok

PENDING_MAX = 256 * 1024
ENQUEUE_TIMEOUT_MS = 200


def test_pending_bytes_are_bounded_and_excess_adds_get_busy_after_the_timeout(tmp_path: Path) -> None:
    engine = open_engine(tmp_path / "d", max_pending_add_bytes=PENDING_MAX,
                         add_enqueue_timeout_ms=ENQUEUE_TIMEOUT_MS)
    stall = threading.Event()
    stalled = threading.Event()
    try:
        # A callback that blocks stalls acknowledgements, so nothing pending is released.
        def blocking_on_done(status: Status) -> None:
            stalled.set()
            stall.wait(WAIT_S)

        lg = (0, 1)
        # From another thread: at low load the add is journaled inline, callback included.
        threading.Thread(target=engine.add_batch, args=(lg, KEY, [(0, -1, b"a" * 1000)], False, blocking_on_done),
                         daemon=True).start()
        assert stalled.wait(WAIT_S)
        outcomes: dict[int, Status] = {}
        lock = threading.Lock()
        peak = 0
        busy_after: list[float] = []

        def on_done_for(i: int):
            def on_done(status: Status) -> None:
                with lock:
                    outcomes[i] = status
            return on_done

        for i in range(1, 12):  # 11 x ~40 KiB > 256 KiB
            started = time.monotonic()
            entries = [(e, e - 1, payload(lg, e, 1000)) for e in range(i * 40, i * 40 + 40)]
            engine.add_batch(lg, KEY, entries, False, on_done_for(i))
            peak = max(peak, engine.stats()["pending_add_bytes"])
            with lock:
                if outcomes.get(i) == Status.BUSY:
                    busy_after.append(time.monotonic() - started)
        assert peak <= PENDING_MAX
        assert busy_after, "no add was refused although the pending bound was exceeded"
        assert all(ENQUEUE_TIMEOUT_MS / 1000 * 0.9 <= t < 5.0 for t in busy_after), busy_after
        assert engine.stats()["busy_rejections"] == len(busy_after)
        stall.set()
        deadline = time.monotonic() + WAIT_S
        while len(outcomes) < 11 and time.monotonic() < deadline:
            time.sleep(0.01)
        accepted = [i for i, s in outcomes.items() if s == Status.OK]
        assert sorted(accepted + [i for i, s in outcomes.items() if s == Status.BUSY]) == list(range(1, 12))
        for i in accepted:
            read_all_ok(engine, lg, range(i * 40, i * 40 + 40), size=1000)
        assert engine.stats()["pending_add_bytes"] == 0
        # Once drained, adds are accepted again.
        assert add_ids(engine, (0, 2), range(10)) == Status.OK
    finally:
        stall.set()
        engine.close()


def test_close_completes_queued_adds(tmp_path: Path) -> None:
    engine = open_engine(tmp_path / "d")
    results: list[Status] = []
    lock = threading.Lock()

    def on_done(status: Status) -> None:
        with lock:
            results.append(status)

    for i in range(50):
        engine.add_batch((0, 1), KEY, [(e, e - 1, payload((0, 1), e)) for e in range(i * 20, i * 20 + 20)],
                         False, on_done)
    engine.close()
    assert results == [Status.OK] * 50
    engine = open_engine(tmp_path / "d")
    try:
        read_all_ok(engine, (0, 1), range(1000))
    finally:
        engine.close()


def test_journal_write_failure_fails_adds_and_the_engine_stays_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = open_engine(tmp_path / "d")
    try:
        assert add_ids(engine, (0, 1), range(10)) == Status.OK

        def broken_append(self: JournalWriter, data: bytes) -> None:
            raise OSError(errno.EIO, "injected journal write failure")

        monkeypatch.setattr(JournalWriter, "append", broken_append)
        assert add_ids(engine, (0, 1), range(10, 20)) == Status.INTERNAL_ERROR  # the add that met the failure
        # From then on the engine is read-only: adds, recovery adds and fences are refused as such.
        assert add_ids(engine, (0, 1), range(10, 20)) == Status.READ_ONLY
        assert engine.fence((0, 1), KEY)[0] == Status.READ_ONLY
        assert engine.stats()["failed"] and engine.read_only and engine.journal_failed
        engine.set_read_only(False)  # the disk monitor finding room cannot make it writable
        assert engine.read_only and add_ids(engine, (0, 1), range(10, 20)) == Status.READ_ONLY
        read_all_ok(engine, (0, 1), range(10))
        assert engine.read_entry((0, 1), 10).status == Status.NO_SUCH_ENTRY
        monkeypatch.undo()
    finally:
        engine.close()
    engine = open_engine(tmp_path / "d")
    try:
        read_all_ok(engine, (0, 1), range(10))
        assert add_ids(engine, (0, 1), range(10, 20)) == Status.OK
    finally:
        engine.close()
