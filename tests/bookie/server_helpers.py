"""Helpers for tests that drive real `bookie` processes over gRPC."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Sequence

from bookie.status import Status
from pyspark_ledger.bookie_client import BookieClient

KEY = b"K" * 20


class Acks:
    """Collects add callbacks: which batches were acknowledged, with which status."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.ok: list[Sequence[tuple[int, int, bytes]]] = []
        self.failed: list[tuple[Status, str]] = []
        self.count = 0

    def callback(self, entries: Sequence[tuple[int, int, bytes]]):  # type: ignore[no-untyped-def]
        def cb(status: Status, message: str) -> None:
            with self.lock:
                if status == Status.OK:
                    self.ok.append(entries)
                else:
                    self.failed.append((status, message))
                self.count += 1
                self.lock.notify_all()

        return cb

    def wait(self, n: int, timeout_s: float = 20.0) -> None:
        with self.lock:
            assert self.lock.wait_for(lambda: self.count >= n, timeout=timeout_s), f"only {self.count}/{n} completions"


def add_sync(client: BookieClient, ledger: tuple[int, int], entries: list[tuple[int, int, bytes]],
             key: bytes = KEY, recovery: bool = False) -> tuple[Status, str]:
    done = threading.Event()
    out: list[tuple[Status, str]] = []

    def cb(status: Status, message: str) -> None:
        out.append((status, message))
        done.set()

    client.add_batch(ledger, key, entries, cb, recovery=recovery)
    assert done.wait(20), "add never completed"
    return out[0]


def read_all(client: BookieClient, ledger: tuple[int, int], first: int, last: int) -> dict[int, tuple[Status, bytes]]:
    """Read first..last, following the server's response bounds."""
    out: dict[int, tuple[Status, bytes]] = {}
    nxt = first
    while nxt <= last:
        resp = client.read(ledger, nxt, last)
        assert resp.status == Status.OK, Status(resp.status).name
        assert len(resp.entry_ids) > 0
        for eid, st, data in zip(resp.entry_ids, resp.entry_status, resp.entries):
            out[eid] = (Status(st), data)
        nxt = resp.entry_ids[-1] + 1
    return out


def flip_stored_copies(data_dir: Path, marker: bytes) -> int:
    """Flip one bit inside `marker` in every entry-log file (not the journal) that holds it, as
    bit rot at rest would; returns how many files were changed. Run on a stopped bookie."""
    flipped = 0
    for f in data_dir.rglob("*"):
        if f.is_file() and "journal" not in f.parts:
            data = bytearray(f.read_bytes())
            i = data.find(marker)
            if i >= 0:
                data[i + 5] ^= 0x40
                f.write_bytes(bytes(data))
                flipped += 1
    return flipped
