"""Bulk journal items (recovery adds: re-replication copies) yield to the others: a group carries at
most BULK_GROUP_BYTES_MAX of them, items behind a waiting bulk item go first unless they are of its
ledger (per-ledger order is arrival order), every take makes progress, and with no bulk item
queued a take is the plain FIFO it was. A real storage engine marks recovery adds bulk."""

from __future__ import annotations

import threading
from pathlib import Path

from bookie.status import Status
from bookie.storage.journal_queue import BULK_GROUP_BYTES_MAX, KIND_ADD, JournalItem, JournalQueue

GROUP_BYTES_MAX = 4 * 2**20
COPY_BYTES = BULK_GROUP_BYTES_MAX // 2 + 1  # two never share a group
SMALL = 1024


def item(name: str, ledger: int, size: int, bulk: bool = False) -> JournalItem:
    return JournalItem((name.encode().ljust(size, b"."),), KIND_ADD, (0, ledger), name, None, bulk=bulk)


def groups(q: JournalQueue, n_max: int = 50) -> list[list[str]]:
    """Take groups until the queue is empty: their items' names."""
    out = []
    for _ in range(n_max):
        if not q.has_items():
            return out
        group = q.take(GROUP_BYTES_MAX, 0.01, 0.0)
        assert group, "a queue with items gave no group"
        out.append([it.payload for it in group])
        q.end_write()
    raise AssertionError(f"still items after {n_max} groups")


def test_small_adds_go_ahead_of_queued_copies_and_each_group_carries_one_slice_of_copies() -> None:
    q = JournalQueue(1 << 30)
    for name, ledger, size, bulk in [("copy-a1", 1, COPY_BYTES, True), ("copy-a2", 1, COPY_BYTES, True),
                                     ("copy-b1", 2, COPY_BYTES, True), ("add-1", 9, SMALL, False),
                                     ("add-2", 9, SMALL, False)]:
        q.push(item(name, ledger, size, bulk))
    assert groups(q) == [["copy-a1", "add-1", "add-2"], ["copy-a2"], ["copy-b1"]]


def test_a_ledgers_own_items_never_pass_its_waiting_copy() -> None:
    q = JournalQueue(1 << 30)
    for name, ledger, size, bulk in [("copy-a1", 1, COPY_BYTES, True), ("copy-b1", 2, COPY_BYTES, True),
                                     ("fence-b", 2, SMALL, False), ("add-c", 3, SMALL, False),
                                     ("copy-b2", 2, SMALL, True)]:
        q.push(item(name, ledger, size, bulk))
    got = groups(q)
    assert got == [["copy-a1", "add-c"], ["copy-b1", "fence-b", "copy-b2"]]
    order_b = [n for g in got for n in g if n.endswith("b") or "-b" in n]
    assert order_b == ["copy-b1", "fence-b", "copy-b2"], "ledger 2's items in arrival order"


def test_a_copy_larger_than_the_slice_goes_alone_and_without_copies_a_take_is_fifo() -> None:
    q = JournalQueue(1 << 30)
    q.push(item("big-1", 1, BULK_GROUP_BYTES_MAX * 2, True))
    q.push(item("big-2", 2, BULK_GROUP_BYTES_MAX * 2, True))
    assert groups(q) == [["big-1"], ["big-2"]]
    for i in range(5):
        q.push(item(f"add-{i}", i % 2, SMALL))
    assert groups(q) == [[f"add-{i}" for i in range(5)]]
    big = [item(f"add-{i}", 1, GROUP_BYTES_MAX // 2 - 16) for i in range(4)]
    for it in big:
        q.push(it)
    assert groups(q) == [["add-0", "add-1"], ["add-2", "add-3"]], "the group byte bound holds as before"


def test_the_storage_marks_recovery_adds_bulk_and_writers_adds_not(tmp_path: Path) -> None:
    from tests.bookie.test_storage_support import KEY, open_engine, payload

    engine = open_engine(tmp_path / "d")
    queued: list[JournalItem] = []
    queue = engine._writes._queue  # the engine's own queue: record what it is given
    push = queue.push

    def record(it: JournalItem) -> bool:
        queued.append(it)
        return push(it)

    queue.push = record  # type: ignore[method-assign]  # a recording seam on this one queue object
    done = threading.Semaphore(0)
    statuses: list[Status] = []

    def on_done(status: Status) -> None:
        statuses.append(status)
        done.release()

    try:
        lg = (0, 7)
        for e, recovery in enumerate((False, True)):
            engine.add_batch(lg, KEY, [(e, -1, payload(lg, e))], recovery, on_done, allow_inline=False)
            assert done.acquire(timeout=60), "the add was not answered"
    finally:
        engine.close()
    assert [it.bulk for it in queued if it.kind == KIND_ADD] == [False, True]
    assert statuses == [Status.OK, Status.OK]
