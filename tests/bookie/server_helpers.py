"""Helpers for tests that drive real `bookie` processes over gRPC."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

from bookie.proto import bookie_pb2 as pb
from bookie.status import Status
from pyspark_ledger.transport.bookie_client import BookieClient

KEY = b"K" * 20


class Acks:
    """Collects add callbacks: which batches were acknowledged, with which status."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.ok: list[Sequence[tuple[int, int, bytes]]] = []
        self.failed: list[tuple[Status, str]] = []
        self.count = 0

    def callback(self, entries: Sequence[tuple[int, int, bytes]]):
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


def mixed_add_requests(ledgers: tuple[int, int, int]) -> list[pb.AddRequest]:
    """Two add requests for ledgers (a, b, c): a good batch to a, a malformed one to b (lacs
    missing), a good one to c and one to a with the wrong master key; then one more good batch to
    c. Request ids 11..15. What a bookie must answer is in check_mixed_answers."""
    a, b, c = ledgers

    def batch(rid: int, ledger: int, ids: list[int], lacs: list[int], entries: list[bytes], key: bytes = KEY) -> pb.AddBatch:
        return pb.AddBatch(request_id=rid, ledger=pb.LedgerRef(ledger_id=ledger), master_key=key, entry_ids=ids,
                           lacs=lacs, entries=entries)

    return [pb.AddRequest(batches=[batch(11, a, [0, 1], [-1, -1], [b"a", b"b"]), batch(12, b, [0], [], [b"c"]),
                                   batch(13, c, [0], [-1], [b"d"]), batch(14, a, [2], [1], [b"e"], key=b"other" * 4)]),
            pb.AddRequest(batches=[batch(15, c, [1], [0], [b"f"])])]


def check_mixed_answers(responses: list[pb.AddResponse], client: BookieClient, ledgers: tuple[int, int, int]) -> None:
    """Two answers, in order, one result per batch in its request's order; the good entries are
    readable and the malformed batch stored nothing."""
    a, b, c = ledgers
    got = [[(r.request_id, Status(r.status)) for r in resp.results] for resp in responses]
    assert got == [[(11, Status.OK), (12, Status.INVALID_REQUEST), (13, Status.OK), (14, Status.UNAUTHORIZED)],
                   [(15, Status.OK)]]
    assert "equally many" in responses[0].results[1].message
    assert {e: v[1] for e, v in read_all(client, (0, a), 0, 1).items()} == {0: b"a", 1: b"b"}
    assert {e: v[1] for e, v in read_all(client, (0, c), 0, 1).items()} == {0: b"d", 1: b"f"}
    assert client.read((0, b), 0, 0).status == Status.NO_SUCH_LEDGER
