"""durable_files.pwritev_all: every part, in order, whatever the kernel's counts."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from bookie.storage import durable_files


def write_parts(path: Path, parts: list[bytes], offset: int = 0) -> bytes:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        assert durable_files.pwritev_all(fd, parts, offset) == sum(map(len, parts))
    finally:
        os.close(fd)
    return path.read_bytes()


def test_more_parts_than_one_call_takes_land_in_order(tmp_path: Path) -> None:
    rnd = random.Random(7)
    parts = [rnd.randbytes(rnd.randrange(0, 40)) for _ in range(3 * durable_files.IOV_MAX + 5)]
    assert write_parts(tmp_path / "f", parts, offset=3) == bytes(3) + b"".join(parts)


def test_short_writes_are_resumed_mid_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.pwritev

    def at_most_7_bytes(fd: int, buffers: list[memoryview], offset: int) -> int:
        return real(fd, [bytes(b"".join(bytes(b) for b in buffers)[:7])], offset)

    monkeypatch.setattr(durable_files.os, "pwritev", at_most_7_bytes)
    parts = [b"abc", b"", b"defghijklmnop", b"q" * 30, b"r"]
    assert write_parts(tmp_path / "f", parts) == b"".join(parts)
