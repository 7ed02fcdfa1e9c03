"""The journal's O_DIRECT appends (bookie/storage/direct_append.py): the file's bytes are exactly
those of buffered appends, across the last partial block, buffer growth, rolls and close."""

from __future__ import annotations

import fcntl
import os
import random
from pathlib import Path

import pytest

from bookie.storage.direct_append import BLOCK_BYTES, BUFFER_STEP_BYTES, DirectAppender, reopen_direct


def _direct_fd(path: Path) -> int:
    path.touch()
    fd = reopen_direct(path)
    if fd is None:
        pytest.skip(f"no O_DIRECT on the file system of {path}")  # the writer falls back by itself there
    return fd


def _group_sizes(rng: random.Random) -> list[list[int]]:
    """Groups of parts: tiny, block-sized, crossing blocks, and one past the buffer (it grows)."""
    groups = [[1], [BLOCK_BYTES - 1], [1], [BLOCK_BYTES], [37, 5000, 3], [BUFFER_STEP_BYTES + 123, 7]]
    groups += [[rng.randrange(1, 20_000) for _ in range(rng.randrange(1, 6))] for _ in range(40)]
    return groups


def _append_all(appender: DirectAppender, path: Path, seed: int) -> bytes:
    """Append random groups; after every one the file must hold exactly what was appended, then zeros."""
    rng = random.Random(seed)
    expected = bytearray()
    for sizes in _group_sizes(rng):
        parts = [rng.randbytes(n) for n in sizes]
        end = appender.append([parts[0], memoryview(b"".join(parts[1:]))] if len(parts) > 1 else parts)
        expected += b"".join(parts)
        assert end == appender.end == len(expected)
        data = path.read_bytes()
        assert data[:len(expected)] == expected, f"seed {seed}: bytes differ after {len(expected)} appended"
        assert not any(data[len(expected):]), "only zeros may follow the end"
        assert len(data) % BLOCK_BYTES == 0 and len(data) - len(expected) < BLOCK_BYTES
    return bytes(expected)


@pytest.mark.parametrize("seed", [1, 2])
def test_direct_appends_leave_exactly_the_appended_bytes(tmp_path: Path, seed: int) -> None:
    path = tmp_path / "f.log"
    fd = _direct_fd(path)
    appender = DirectAppender(fd)
    try:
        assert os.O_DIRECT & fcntl.fcntl(fd, fcntl.F_GETFL)
        _append_all(appender, path, seed)
    finally:
        appender.close()
        os.close(fd)


class _ForgetsTheTail(DirectAppender):
    """A planted defect: the last partial block is not carried over to the next append."""

    __slots__ = ()

    def append(self, parts: list[bytes | memoryview]) -> int:  # type: ignore[override]
        end = super().append(parts)
        self._view[:BLOCK_BYTES] = bytes(BLOCK_BYTES)
        return end


def test_the_checker_catches_a_lost_partial_block(tmp_path: Path) -> None:
    path = tmp_path / "f.log"
    fd = _direct_fd(path)
    appender = _ForgetsTheTail(fd)
    try:
        with pytest.raises(AssertionError, match="bytes differ"):
            _append_all(appender, path, 1)
    finally:
        appender.close()
        os.close(fd)


def test_direct_journal_is_cut_to_length_on_roll_and_close_and_replays(tmp_path: Path) -> None:
    from bookie.storage import records
    from bookie.storage.journal import JournalPosition, JournalWriter, journal_path, replay_journal

    os.close(_direct_fd(tmp_path / "probe"))  # skips where the file system has no O_DIRECT
    writer = JournalWriter(tmp_path, 0, file_max_bytes=10_000, fsync=True, direct_io=True)
    assert writer._direct is not None  # the mode under test
    written = []
    for i in range(12):
        parts = records.encode_master_key(1, i, b"k" * (500 + 97 * i))
        written.append(b"".join(parts))
        writer.append(parts)
        writer.sync()
        writer.maybe_roll()
    writer.close()
    seqs = sorted(int(p.stem, 16) for p in tmp_path.glob("*.log"))
    assert len(seqs) >= 2
    assert b"".join(journal_path(tmp_path, s).read_bytes() for s in seqs) == b"".join(written)
    got: list[bytes] = []
    outcome = replay_journal(tmp_path, JournalPosition(seqs[0], 0), repair=False, fsync=False,
                             handle=lambda body: got.append(bytes(body)))
    assert outcome.records == 12 and outcome.truncated == [] and outcome.skipped == []


def test_direct_io_off_or_without_fsync_writes_through_the_page_cache(tmp_path: Path) -> None:
    from bookie.storage.journal import JournalWriter

    for direct_io, fsync in ((False, True), (True, False)):
        directory = tmp_path / f"{direct_io}-{fsync}"
        directory.mkdir()
        writer = JournalWriter(directory, 0, 2**20, fsync=fsync, direct_io=direct_io)
        assert writer._direct is None  # the mode under test
        writer.append([b"x" * 10])
        writer.close()
        assert (directory / f"{0:016x}.log").read_bytes() == b"x" * 10
