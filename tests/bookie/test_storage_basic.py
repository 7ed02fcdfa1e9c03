"""Storage engine, in process: adds, reads, ranges, keys, fencing, LAC, deletes, modes."""

from __future__ import annotations

import threading
import time
from array import array
from pathlib import Path

import pytest

from bookie.status import Status
from bookie.storage import BookieStorage, StorageLockedError
from bookie.storage.config import ENTRY_ID_MAX, INDEX_PAGE_BITS
from bookie.storage.ledger_index import LedgerIndex
from tests.bookie.test_storage_support import (
    KEY,
    OTHER_KEY,
    WAIT_S,
    add,
    add_ids,
    open_engine,
    payload,
    read_all_ok,
    seeded_rng,
)

U64_MAX = 2**64 - 1


@pytest.fixture
def engine(tmp_path: Path):
    e = open_engine(tmp_path / "data")
    try:
        yield e
    finally:
        e.close()


def test_round_trip_across_ledgers_scopes_and_max_ids(engine: BookieStorage) -> None:
    rng, _ = seeded_rng("test_round_trip_across_ledgers_scopes_and_max_ids")
    ledgers = [(0, 1), (0, U64_MAX), (5, 2), (U64_MAX, 0), (U64_MAX, U64_MAX), (2**63, 2**63 + 1)]
    next_id = {lg: 0 for lg in ledgers}
    for _ in range(60):
        lg = rng.choice(ledgers)
        n = rng.randint(1, 40)
        first = next_id[lg]
        assert add_ids(engine, lg, range(first, first + n)) == Status.OK
        next_id[lg] += n
    assert sorted(engine.ledgers()) == sorted(lg for lg in ledgers if next_id[lg])
    for lg in ledgers:
        read_all_ok(engine, lg, range(next_id[lg]))
        status, results = engine.read_range(lg, 0, next_id[lg] + 5, 10_000, 2**30)
        if next_id[lg] == 0:
            assert status == Status.NO_SUCH_LEDGER
            continue
        assert status == Status.OK
        assert [r.entry_id for r in results] == list(range(next_id[lg] + 6))
        assert [r.data for r in results[: next_id[lg]]] == [payload(lg, e) for e in range(next_id[lg])]
        assert {r.status for r in results[next_id[lg]:]} == {Status.NO_SUCH_ENTRY}
        state = engine.ledger_state(lg)
        assert state is not None and state.entry_count == next_id[lg] and state.has_master_key
        assert state.size_bytes == sum(len(payload(lg, e)) for e in range(next_id[lg]))
        assert state.lac == next_id[lg] - 2 and not state.fenced


def test_highest_entry_id_is_accepted_and_beyond_is_invalid(engine: BookieStorage) -> None:
    lg = (1, 1)
    assert add(engine, lg, [(ENTRY_ID_MAX, 3, b"last")]) == Status.OK
    assert engine.read_entry(lg, ENTRY_ID_MAX).data == b"last"
    assert add(engine, lg, [(ENTRY_ID_MAX + 1, 3, b"x")]) == Status.INVALID_REQUEST
    assert engine.read_entry(lg, 0).status == Status.NO_SUCH_ENTRY
    assert add(engine, lg, [(0, -1, b"first")]) == Status.OK  # far below: another index page
    status, results = engine.read_range(lg, ENTRY_ID_MAX - 2, ENTRY_ID_MAX, 10, 2**20)
    assert [r.status for r in results] == [Status.NO_SUCH_ENTRY] * 2 + [Status.OK]


def test_holes_from_striping_are_no_such_entry_and_read_with_one_pread(engine: BookieStorage) -> None:
    # E=3, W=2: this bookie holds entries e with e % 3 in (0, 1).
    lg = (0, 42)
    mine = [e for e in range(300) if e % 3 != 2]
    for i in range(0, len(mine), 50):
        assert add_ids(engine, lg, mine[i : i + 50], size=100) == Status.OK
    before = engine.stats()["read_preads"]
    status, results = engine.read_range(lg, 0, 299, 1000, 2**30)
    assert status == Status.OK and len(results) == 300
    for r in results:
        if r.entry_id % 3 == 2:
            assert (r.status, r.data) == (Status.NO_SUCH_ENTRY, b"")
        else:
            assert (r.status, r.data) == (Status.OK, payload(lg, r.entry_id, 100))
    # Batches were appended back to back, so the whole range is one contiguous byte run.
    assert engine.stats()["read_preads"] - before == 1


def test_range_across_entry_log_files_and_interleaved_ledgers(tmp_path: Path) -> None:
    engine = open_engine(tmp_path / "d", entry_log_max_bytes=8 * 1024)
    try:
        for first in range(0, 200, 20):  # two ledgers interleaved, logs roll every ~8 KiB
            assert add_ids(engine, (0, 1), range(first, first + 20), size=300) == Status.OK
            assert add_ids(engine, (0, 2), range(first, first + 20), size=300) == Status.OK
        for lg in [(0, 1), (0, 2)]:
            status, results = engine.read_range(lg, 0, 199, 1000, 2**30)
            assert status == Status.OK
            assert [(r.entry_id, r.status, r.data) for r in results] == [
                (e, Status.OK, payload(lg, e, 300)) for e in range(200)]
    finally:
        engine.close()


def test_out_of_order_batches_and_overwrites(engine: BookieStorage) -> None:
    lg = (3, 3)
    assert add_ids(engine, lg, range(10, 20)) == Status.OK
    assert add_ids(engine, lg, range(0, 10)) == Status.OK  # below the index base
    assert add_ids(engine, lg, [15, 12, 30, 5]) == Status.OK  # unordered, re-adds and a gap
    assert add_ids(engine, lg, range(5, 15)) == Status.OK  # re-replication of a run
    read_all_ok(engine, lg, [*range(20), 30])
    state = engine.ledger_state(lg)
    assert state is not None and state.entry_count == 21
    assert state.size_bytes == sum(len(payload(lg, e)) for e in [*range(20), 30])
    assert engine.read_entry(lg, 25).status == Status.NO_SUCH_ENTRY


def test_range_is_bounded_by_count_and_bytes(engine: BookieStorage) -> None:
    lg = (0, 7)
    assert add(engine, lg, [(e, e - 1, bytes([e]) * 100) for e in range(50)]) == Status.OK
    _, results = engine.read_range(lg, 10, 49, 7, 2**30)
    assert [r.entry_id for r in results] == list(range(10, 17))
    _, results = engine.read_range(lg, 10, 49, 100, 350)  # 3 entries fit, the 4th would not
    assert [r.entry_id for r in results] == [10, 11, 12]
    _, results = engine.read_range(lg, 10, 49, 100, 10)  # the first entry always comes back
    assert [(r.entry_id, r.data) for r in results] == [(10, bytes([10]) * 100)]
    _, results = engine.read_range(lg, 45, 47, 100, 2**30)
    assert [r.entry_id for r in results] == [45, 46, 47]
    for bad in [(-1, 3), (5, 4)]:
        assert engine.read_range(lg, bad[0], bad[1], 10, 100)[0] == Status.INVALID_REQUEST
    assert engine.read_range(lg, 0, 3, 0, 100)[0] == Status.INVALID_REQUEST


def test_wrong_master_key_is_unauthorized_everywhere(engine: BookieStorage) -> None:
    lg = (9, 9)
    assert add_ids(engine, lg, range(3)) == Status.OK
    assert add_ids(engine, lg, range(3, 6), key=OTHER_KEY) == Status.UNAUTHORIZED
    assert engine.fence(lg, OTHER_KEY) == (Status.UNAUTHORIZED, -1)
    assert engine.write_lac(lg, OTHER_KEY, 2) == Status.UNAUTHORIZED
    state = engine.ledger_state(lg)
    assert state is not None and not state.fenced and state.entry_count == 3


def test_fence_rejects_normal_adds_and_accepts_recovery_adds(engine: BookieStorage) -> None:
    lg = (0, 11)
    assert add_ids(engine, lg, range(10)) == Status.OK
    assert engine.fence(lg, KEY) == (Status.OK, 8)
    assert add_ids(engine, lg, [10]) == Status.FENCED
    assert add_ids(engine, lg, [10], recovery=True) == Status.OK
    assert engine.fence(lg, KEY) == (Status.OK, 9)  # fencing again is fine
    read_all_ok(engine, lg, range(11))
    state = engine.ledger_state(lg)
    assert state is not None and state.fenced


def test_fencing_an_unseen_ledger_creates_it_fenced(engine: BookieStorage) -> None:
    lg = (4, 4)
    assert engine.fence(lg, KEY) == (Status.OK, -1)
    state = engine.ledger_state(lg)
    assert state is not None and state.fenced and state.has_master_key and state.entry_count == 0
    assert add_ids(engine, lg, [0]) == Status.FENCED
    assert add_ids(engine, lg, [0], key=OTHER_KEY, recovery=True) == Status.UNAUTHORIZED
    assert add_ids(engine, lg, [0], recovery=True) == Status.OK
    assert engine.read_range(lg, 0, 0, 1, 100)[1][0].data == payload(lg, 0)


@pytest.mark.parametrize(
    "case, ledger, key, entries, expected",
    [
        ("empty batch", (0, 1), KEY, [], Status.INVALID_REQUEST),
        ("negative entry id", (0, 1), KEY, [(-1, -1, b"x")], Status.INVALID_REQUEST),
        ("lac below -1", (0, 1), KEY, [(0, -2, b"x")], Status.INVALID_REQUEST),
        ("entry id not an int", (0, 1), KEY, [("0", -1, b"x")], Status.INVALID_REQUEST),
        ("data not bytes", (0, 1), KEY, [(0, -1, "text")], Status.INVALID_REQUEST),
        ("entry tuple too short", (0, 1), KEY, [(0, b"x")], Status.INVALID_REQUEST),
        ("negative ledger id", (0, -1), KEY, [(0, -1, b"x")], Status.INVALID_REQUEST),
        ("ledger id above 64 bits", (2**64, 1), KEY, [(0, -1, b"x")], Status.INVALID_REQUEST),
        ("ledger not a pair", (1,), KEY, [(0, -1, b"x")], Status.INVALID_REQUEST),
        ("master key too long", (0, 1), b"k" * 2000, [(0, -1, b"x")], Status.INVALID_REQUEST),
        ("master key not bytes", (0, 1), "k", [(0, -1, b"x")], Status.INVALID_REQUEST),
        ("entry too large", (0, 1), KEY, [(0, -1, b"x" * 4097)], Status.TOO_LARGE),
        ("one bad entry fails the batch", (0, 1), KEY, [(0, -1, b"ok"), (1, 0, b"x" * 5000)], Status.TOO_LARGE),
    ],
)
def test_bad_adds_are_refused_and_the_engine_keeps_working(
    tmp_path: Path, case: str, ledger, key, entries, expected
) -> None:
    engine = open_engine(tmp_path / "data", max_entry_size_bytes=4096)
    try:
        calls: list[Status] = []
        engine.add_batch(ledger, key, entries, False, calls.append)
        assert calls == [expected], case  # refusals are synchronous
        assert engine.ledgers() == []
        assert add_ids(engine, (0, 1), range(5)) == Status.OK
        read_all_ok(engine, (0, 1), range(5))
    finally:
        engine.close()


def test_batch_larger_than_the_pending_bound_is_too_large(tmp_path: Path) -> None:
    engine = open_engine(tmp_path / "data", max_pending_add_bytes=64 * 1024)
    try:
        big = [(e, e - 1, b"x" * 1000) for e in range(100)]
        assert add(engine, (0, 1), big) == Status.TOO_LARGE
        assert add(engine, (0, 1), big[:10]) == Status.OK
    finally:
        engine.close()


def test_read_only_refuses_writes_but_not_recovery_fence_or_reads(engine: BookieStorage) -> None:
    lg = (0, 5)
    assert add_ids(engine, lg, range(3)) == Status.OK
    engine.set_read_only(True)
    assert engine.read_only
    assert add_ids(engine, lg, [3]) == Status.READ_ONLY
    assert engine.write_lac(lg, KEY, 2) == Status.READ_ONLY
    assert add_ids(engine, lg, [3], recovery=True) == Status.OK  # high-priority write
    assert engine.fence(lg, KEY)[0] == Status.OK
    read_all_ok(engine, lg, range(4))
    engine.set_read_only(False)
    assert add_ids(engine, (0, 6), [0]) == Status.OK


def test_lac_is_the_highest_seen_and_explicit_lac_raises_it(engine: BookieStorage) -> None:
    lg = (0, 8)
    assert engine.read_lac(lg) == (Status.NO_SUCH_LEDGER, -1)
    assert add_ids(engine, lg, range(5)) == Status.OK
    assert engine.read_lac(lg) == (Status.OK, 3)
    assert engine.write_lac(lg, KEY, 4) == Status.OK
    assert engine.read_lac(lg) == (Status.OK, 4)
    assert engine.write_lac(lg, KEY, 1) == Status.OK  # never goes backwards
    assert engine.read_lac(lg) == (Status.OK, 4)
    assert engine.write_lac(lg, KEY, -5) == Status.INVALID_REQUEST
    assert engine.write_lac((0, 99), KEY, 7) == Status.OK  # creates the ledger, like an add
    assert engine.read_lac((0, 99)) == (Status.OK, 7)
    assert engine.fence(lg, KEY) == (Status.OK, 4)
    assert engine.write_lac(lg, KEY, 6) == Status.FENCED


def test_wait_lac_returns_when_the_lac_arrives_or_at_the_timeout(engine: BookieStorage) -> None:
    lg = (0, 12)
    assert add_ids(engine, lg, range(3)) == Status.OK  # lac 1
    assert engine.wait_lac(lg, 1, 5.0) == (Status.OK, 1)  # already there: immediate
    started = time.monotonic()
    assert engine.wait_lac(lg, 5, 0.2) == (Status.OK, 1)  # times out with the current lac
    assert 0.15 < time.monotonic() - started < 2.0
    got: list[tuple[Status, int]] = []
    waiter = threading.Thread(target=lambda: got.append(engine.wait_lac(lg, 5, WAIT_S)))
    waiter.start()
    time.sleep(0.05)
    started = time.monotonic()
    assert add_ids(engine, lg, range(3, 8)) == Status.OK  # lac 6
    waiter.join(WAIT_S)
    assert got == [(Status.OK, 6)] and time.monotonic() - started < 2.0
    assert engine.wait_lac((0, 404), 0, 0.1) == (Status.NO_SUCH_LEDGER, -1)
    # A delete wakes a waiter and answers NO_SUCH_LEDGER.
    waiter = threading.Thread(target=lambda: got.append(engine.wait_lac(lg, 100, WAIT_S)))
    waiter.start()
    time.sleep(0.05)
    assert engine.delete_ledger(lg) == Status.OK
    waiter.join(WAIT_S)
    assert got[-1] == (Status.NO_SUCH_LEDGER, -1)


def test_deleted_ledger_is_gone_for_every_operation(engine: BookieStorage) -> None:
    lg = (2, 2)
    assert add_ids(engine, lg, range(4)) == Status.OK
    assert engine.delete_ledger(lg) == Status.OK
    assert engine.delete_ledger(lg) == Status.OK  # idempotent
    assert engine.delete_ledger((2, 3)) == Status.NO_SUCH_LEDGER
    assert lg not in engine.ledgers() and engine.ledger_state(lg) is None
    assert engine.read_range(lg, 0, 3, 10, 2**20) == (Status.NO_SUCH_LEDGER, [])
    assert engine.read_entry(lg, 0).status == Status.NO_SUCH_LEDGER
    assert engine.read_lac(lg) == (Status.NO_SUCH_LEDGER, -1)
    assert add_ids(engine, lg, [4]) == Status.NO_SUCH_LEDGER
    assert add_ids(engine, lg, [4], recovery=True) == Status.NO_SUCH_LEDGER
    assert engine.fence(lg, KEY) == (Status.NO_SUCH_LEDGER, -1)
    assert engine.write_lac(lg, KEY, 3) == Status.NO_SUCH_LEDGER


def test_concurrent_writers_and_readers(engine: BookieStorage) -> None:
    rng, seed = seeded_rng("test_concurrent_writers_and_readers")
    writers = 4
    batches = 30
    errors: list[str] = []
    progress = [0] * writers

    def writer(i: int) -> None:
        r = __import__("random").Random(seed + i)
        lg = (i, i)
        next_id = 0
        for _ in range(batches):
            n = r.randint(1, 60)
            if add_ids(engine, lg, range(next_id, next_id + n)) != Status.OK:
                errors.append(f"add failed {lg}")
                return
            next_id += n
            progress[i] = next_id

    def reader() -> None:
        for _ in range(200):
            i = rng.randrange(writers)
            acked = progress[i]
            if not acked:
                continue
            status, results = engine.read_range((i, i), 0, acked - 1, 10_000, 2**30)
            if status != Status.OK or any(
                r.status != Status.OK or r.data != payload((i, i), r.entry_id) for r in results
            ):
                errors.append(f"acked entry unreadable ledger={(i, i)} acked={acked}")
                return

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(writers)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    for i in range(writers):
        read_all_ok(engine, (i, i), range(progress[i]))
    stats = engine.stats()
    assert stats["adds"] == sum(progress) and stats["fsyncs"] >= 1
    assert stats["groups"] <= stats["add_batches"] + 10  # group commit groups several batches
    assert stats["fsync_latency"]["count"] == stats["fsyncs"]


def test_disk_usage_and_stats_shape(engine: BookieStorage) -> None:
    used, total = engine.disk_usage()
    assert 0 < used <= total
    stats = engine.stats()
    for name in ("adds", "add_bytes", "groups", "fsyncs", "fsync_latency", "reads", "pending_add_bytes"):
        assert name in stats


def test_second_open_of_the_same_dir_is_refused_and_close_is_idempotent(tmp_path: Path) -> None:
    engine = open_engine(tmp_path / "data")
    with pytest.raises(StorageLockedError):
        open_engine(tmp_path / "data")
    engine.close()
    engine.close()
    assert add_ids(engine, (0, 1), [0]) == Status.INTERNAL_ERROR
    assert engine.read_range((0, 1), 0, 0, 1, 10)[0] == Status.INTERNAL_ERROR
    open_engine(tmp_path / "data").close()


# ---- the index alone ------------------------------------------------------------------------


def test_index_matches_a_dict_model_under_random_puts() -> None:
    rng, _ = seeded_rng("test_index_matches_a_dict_model_under_random_puts")
    index = LedgerIndex()
    model: dict[int, tuple[int, int]] = {}
    page = 1 << INDEX_PAGE_BITS
    for step in range(600):
        kind = rng.random()
        top = max(model, default=rng.randrange(3 * page))
        if kind < 0.45:  # a contiguous batch near the end, sometimes across a page boundary
            first = max(top + rng.randint(-5, 20), 0)
            ids = list(range(first, first + rng.randint(1, 300)))
        elif kind < 0.75:  # striping holes, ascending
            first = max(top + rng.randint(-50, 5), 0)
            stride = rng.choice([2, 3, 5])
            ids = list(range(first, first + stride * rng.randint(1, 80), stride))
        elif kind < 0.9:  # out of order, below and above
            ids = rng.sample(range(max(top - 2 * page, 0), top + 2 * page), rng.randint(1, 10))
        else:  # far away ids: must only cost their own page
            ids = [rng.choice([rng.randrange(2**63), 2**63 - 1 - rng.randrange(10)])]
        locs = array("q", [step * 1000 + i for i in range(len(ids))])
        lens = array("i", [rng.randrange(1, 500) for _ in ids])
        contiguous = ids == list(range(ids[0], ids[0] + len(ids)))
        index.put_batch(ids, locs, lens, contiguous, sum(lens))
        for e, loc, n in zip(ids, locs, lens):
            model[e] = (loc, n)
    assert all(len(p.locs) <= page for p in index.pages.values())
    assert index.count == len(model)
    assert index.size_bytes == sum(n for _, n in model.values())
    for e, expected in model.items():
        assert index.get(e) == expected
    assert index.get(max(model) + 1) is None
    assert list(index.items()) == sorted((e, *v) for e, v in model.items())
    for _ in range(50):
        probe = rng.choice(list(model)) + rng.randint(-page, page)
        count = rng.randint(1, 3 * page)
        locs_w, lens_w = index.window(max(probe, 0), count)
        for k in range(0, count, 7):
            assert (locs_w[k], lens_w[k]) == model.get(max(probe, 0) + k, (-1, 0))
