"""Inline journal writes (low load) never reorder the journal: a claim is only granted when the
queue is empty and nobody is writing, and the journal thread waits while a claim is held."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from bookie.storage.journal_queue import KIND_CONTROL, JournalItem, JournalQueue


def _item(tag: bytes) -> JournalItem:
    return JournalItem((tag,), KIND_CONTROL, (0, 1), None, None)


def test_claim_only_when_idle_and_the_taker_waits_for_it() -> None:
    q = JournalQueue(1 << 20)
    assert q.claim_idle()
    assert not q.claim_idle()  # one writer at a time
    q.push(_item(b"later"))
    taken: list[list[bytes]] = []

    def taker() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            group = q.take(1 << 20, 0.05, 0.0)
            if group:
                taken.append([p for item in group for p in item.parts])
                return

    t = threading.Thread(target=taker)
    t.start()
    time.sleep(0.2)
    assert taken == []  # the inline writer still owns the journal
    q.end_write()
    t.join(10)
    assert taken == [[b"later"]]
    assert not q.claim_idle()  # the taker now owns it until its group is written
    q.end_write()
    assert q.claim_idle()  # idle again: empty queue, nobody writing
    q.end_write()


def test_no_claim_while_items_are_queued() -> None:
    q = JournalQueue(1 << 20)
    q.push(_item(b"queued"))
    assert not q.claim_idle()
    group = q.take(1 << 20, 0.05, 0.0)
    assert group and group[0].parts == (b"queued",)
    q.end_write()
    assert q.claim_idle()
    q.end_write()
    q.close()
    assert not q.claim_idle()  # closed: nothing more is written


def test_fence_during_an_inline_add_returns_only_after_the_add_is_readable(tmp_path: Path) -> None:
    """An add written inline (low load) while a fence arrives: the fence is journaled after it,
    so by the time fence() returns, the add is durable, applied and readable, and the LAC the
    fence reports includes it (what recovery relies on)."""
    from bookie.status import Status
    from tests.bookie.test_storage_support import KEY, open_engine, payload

    engine = open_engine(tmp_path / "d")
    try:
        lg = (0, 5)
        done: list[Status] = []
        engine.add_batch(lg, KEY, [(0, -1, payload(lg, 0))], False, done.append)
        assert done == [Status.OK]  # low load: written inline, answered in this thread
        writer = engine._committer._writer
        real_sync = writer.sync
        in_sync = threading.Event()

        def slow_sync() -> float | None:
            in_sync.set()
            time.sleep(0.3)
            return real_sync()

        writer.sync = slow_sync
        adder = threading.Thread(target=engine.add_batch, args=(lg, KEY, [(1, 0, payload(lg, 1))], False, done.append))
        adder.start()
        assert in_sync.wait(10)
        status, lac = engine.fence(lg, KEY)
        writer.sync = real_sync
        assert status == Status.OK and lac == 0  # entry 1 carried lac 0; it is applied before the fence answers
        assert done == [Status.OK, Status.OK]
        assert engine.read_entry(lg, 1).status == Status.OK
        adder.join(10)
        refused: list[Status] = []
        engine.add_batch(lg, KEY, [(2, 1, payload(lg, 2))], False, refused.append)
        assert refused == [Status.FENCED]
    finally:
        engine.close()


def test_a_request_of_several_batches_shares_one_group_commit(tmp_path: Path) -> None:
    """The service journals a lone batch inline, but the batches of one multi-batch request (what
    a loaded client sends) go through the journal thread together: one write, one fdatasync."""
    from bookie.metrics import Metrics
    from bookie.proto import bookie_pb2 as pb
    from bookie.service import BookieService
    from bookie.status import Status
    from tests.bookie.test_storage_support import KEY, open_engine

    engine = open_engine(tmp_path / "d")
    try:
        service = BookieService(engine, "b", "v", "i", Metrics())

        def batch(ledger: int, entry: int) -> pb.AddBatch:
            return pb.AddBatch(request_id=ledger * 100 + entry, ledger=pb.LedgerRef(ledger_id=ledger), master_key=KEY,
                               entry_ids=[entry], lacs=[entry - 1], entries=[b"x" * 100])

        before = engine.stats()["fsyncs"]
        results = service.adds.handle(pb.AddRequest(batches=[batch(1, 0)]))
        assert [Status(r.status) for r in results] == [Status.OK]
        assert engine.stats()["fsyncs"] == before + 1
        before = engine.stats()["fsyncs"]
        results = service.adds.handle(pb.AddRequest(batches=[batch(lg, 0) for lg in range(2, 10)]))
        assert [Status(r.status) for r in results] == [Status.OK] * 8
        assert engine.stats()["fsyncs"] - before <= 2  # one group (two if the journal thread woke mid-way)
    finally:
        engine.close()
