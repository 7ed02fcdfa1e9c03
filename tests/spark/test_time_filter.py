"""Timestamp pushdown on rows with times of their own (read/time_filter.py, planning.Pruning), without
a JVM: random conditions against a brute-force check of every row and every possible time, the
ledger bounds the writers record (LogLedger.append_times_ms) and how the log record keeps them.

The seeded tests print their seed; LEDGER_TEST_SEED replays one."""

from __future__ import annotations

import datetime as dt
import os
import random
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pytest

from metadata.ids import LedgerId
from metadata.log_record import LogLedger, LogRecord, ledger_from_json, ledger_to_json
from metadata.log_segments import decode_segment, encode_segment
from pyspark_ledger.datasource.read import codec
from pyspark_ledger.datasource.read.batch_unpack import grouped, unpack_entry
from pyspark_ledger.datasource.read.columns import chosen_columns
from pyspark_ledger.datasource.read.planning import Pruning
from pyspark_ledger.datasource.read.pushdown import Condition, PushedFilters, truth
from pyspark_ledger.datasource.read.time_filter import TimeFilter, time_filter
from pyspark_ledger.datasource.rows import PAYLOAD_FIELD, RowPlace
from pyspark_ledger.datasource.write.batch_pack import BatchLimits
from pyspark_ledger.datasource.write.encode import RawBatcher
from pyspark_ledger.datasource.write.packer import ArrowEntryPacker
from pyspark_ledger.protocol.arrow_times import entry_append_ms
from pyspark_ledger.protocol.message_batch import decode_batch

T0 = 1_700_000_000_000  # ms
SPAN_MS = 12  # times drawn from [T0, T0 + SPAN_MS]: small, so literals often meet bounds and rows
EXACT_OPS = ("eq", "gt", "ge", "lt", "le", "eq_null_safe", "is_null", "is_not_null")


def seed() -> int:
    s = int(os.environ.get("LEDGER_TEST_SEED", random.randrange(2**32)))
    print(f"seed={s} (LEDGER_TEST_SEED={s} replays it)")
    return s


def at(ms: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


def random_literal(rng: random.Random) -> dt.datetime | None:
    if rng.random() < 0.05:
        return None
    ms = T0 - 3 + rng.random() * (SPAN_MS + 6)  # sub-ms literals too: a time is whole ms, a literal need not be
    return at(round(ms, 3) if rng.random() < 0.5 else round(ms))


def random_condition(rng: random.Random, ops: tuple[str, ...] = (*EXACT_OPS, "in")) -> Condition:
    op = rng.choice(ops)
    if op in ("is_null", "is_not_null"):
        return Condition("timestamp", op, None, rng.random() < 0.5)
    if op == "in":
        values = tuple(random_literal(rng) for _ in range(rng.randint(1, 4)))
        return Condition("timestamp", "in", values, rng.random() < 0.3)
    return Condition("timestamp", op, random_literal(rng), rng.random() < 0.3)


def brute_force(conds: list[Condition], time_ms: int) -> bool:
    """Whether a row at time_ms passes every condition, by SQL's three-valued truth (pushdown.truth)."""
    return all(truth(c, time_ms * 1000) is True for c in conds)


def check_filter(make: Callable[[list[Condition]], TimeFilter], s: int, cases: int = 600) -> list[str]:
    """Random conditions and row times: every row's mask against the brute force, and every
    ledger pruning decision against every time its bounds allow. Returns the mismatches."""
    rng = random.Random(s)
    bad: list[str] = []
    for case in range(cases):
        conds = [random_condition(rng, EXACT_OPS if rng.random() < 0.5 else (*EXACT_OPS, "in"))
                 for _ in range(rng.randint(1, 3))]
        # The bound test is exact for comparisons; IN and NOT = keep a superset (safe, not exact).
        exact = all(c.op != "in" and not (c.negated and c.op in ("eq", "eq_null_safe")) for c in conds)
        tf = make(conds)
        times = np.array([T0 + rng.randint(0, SPAN_MS) for _ in range(rng.randint(1, 30))], dtype=np.int64)
        got = tf.mask(times).to_pylist()
        want = [brute_force(conds, int(t)) for t in times]
        if got != want:
            bad.append(f"case {case}: mask {got} != {want} for {conds}")
        lo = T0 + rng.randint(0, SPAN_MS)
        hi = lo + rng.randint(0, 4)
        some = any(brute_force(conds, t) for t in range(lo, hi + 1))
        held = tf.may_hold((lo, hi))
        if some and not held:
            bad.append(f"case {case}: [{lo}, {hi}] pruned but holds a passing time, {conds}")
        if exact and held and not some:  # comparisons: the bound test is exact, not only safe
            bad.append(f"case {case}: [{lo}, {hi}] kept but no time in it passes, {conds}")
    return bad


def test_random_conditions_match_the_brute_force_row_by_row_and_bound_by_bound() -> None:
    assert check_filter(TimeFilter, seed()) == []


class OffByOne(TimeFilter):
    """A planted bug: the bounds read one ms narrower at the top (a ledger's last ms is lost)."""

    def may_hold(self, times_ms: tuple[int, int] | None) -> bool:
        return super().may_hold(None if times_ms is None else (times_ms[0], times_ms[1] - 1)
                                if times_ms[1] > times_ms[0] else times_ms)


def test_the_check_catches_a_prune_with_bounds_off_by_one() -> None:
    assert check_filter(OffByOne, seed()) != []


def test_no_conditions_keep_everything_and_a_ledger_without_bounds_is_kept() -> None:
    tf = TimeFilter([])
    assert not tf and tf.mask(np.array([T0, T0 + 1])).to_pylist() == [True, True]
    never = TimeFilter([Condition("timestamp", "is_null")])
    assert never.may_hold(None) and not never.may_hold((T0, T0 + 5))
    with pytest.raises(ValueError, match="not on timestamp"):
        TimeFilter([Condition("seq", "ge", 3)])


def test_far_literals_stay_exact() -> None:
    """Year-9999 literals (beyond float precision in microseconds) do not prune wrongly."""
    far = dt.datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=dt.UTC)
    tf = TimeFilter([Condition("timestamp", "le", far), Condition("timestamp", "ge", at(T0))])
    assert tf.may_hold((T0, T0)) and tf.keeps(T0)
    assert not TimeFilter([Condition("timestamp", "ge", far)]).may_hold((T0, T0 + 10**9))


# ---- planning --------------------------------------------------------------------------------


def ledger(seq: int, ctime: int, times: tuple[int, int] | None) -> LogLedger:
    return LogLedger(seq, LedgerId(0, 100 + seq), ctime, 1, 10, ctime, append_times_ms=times)


def test_pruning_uses_recorded_bounds_for_own_times_and_the_join_time_otherwise() -> None:
    """A job's ledgers share one join time but not their rows' times: the bounds decide them."""
    joined = T0 + 1000
    window = [Condition("timestamp", "ge", at(T0 + 100)), Condition("timestamp", "lt", at(T0 + 200))]
    pruning = Pruning(PushedFilters((*window, Condition("seq", "lt", 3))), bounded=True)
    lgs = [ledger(0, joined, (T0, T0 + 99)), ledger(1, joined, (T0 + 150, T0 + 160)),
           ledger(2, joined, None), ledger(3, joined, (T0 + 150, T0 + 160))]

    def kept(own: bool | None) -> list[int]:
        return [lg.seq for lg in lgs if pruning.keeps(RowPlace("a", lg.seq, "x", lg.ctime_ms), lg, own)]

    assert kept(None) == [1, 2]  # before metadata: by bounds (none: kept); seq 3 by its seq
    assert kept(True) == [1, 2]
    assert kept(False) == []  # rows at the join time, outside the window: exact
    join_window = Pruning(PushedFilters((Condition("timestamp", "eq", at(joined)),)), bounded=True)
    assert [join_window.keeps(RowPlace("a", lg.seq, "x", joined), lg, False) for lg in lgs] == [True] * 4
    unbounded = Pruning(PushedFilters(tuple(window)), bounded=False)  # a lone ledger, or read in another format
    assert all(unbounded.keeps(RowPlace(None, None, "x", joined), lg, True) for lg in lgs)


# ---- the reader's row filter ----------------------------------------------------------------------


def test_batched_rows_are_filtered_by_their_own_times_with_or_without_the_timestamp_column() -> None:
    times = [T0 + i for i in range(10)]
    batcher = RawBatcher(False, BatchLimits(4, 2**20))
    entries = []
    for t in times:  # one row per call: each row its own time
        entries += batcher.add(pa.RecordBatch.from_arrays([pa.array([b"%d" % (t - T0)])], schema=pa.schema([PAYLOAD_FIELD])), t)
    entries += batcher.flush(times[-1])
    rows = list(grouped(unpack_entry(pa.py_buffer(e), i) for i, e in enumerate(entries)))
    tf = time_filter([Condition("timestamp", "gt", at(T0 + 2)), Condition("timestamp", "le", at(T0 + 6))])
    place = RowPlace("a", 0, "0" * 32, T0 + 10_000)
    # A last, unfilled batch waits for the next rows: rows are stamped when packed, not when added.
    stamps = np.concatenate([decode_batch(memoryview(e)).append_ms for e in entries])
    payloads = [b"%d" % (t - T0) for t in times]
    want = [p for p, t in zip(payloads, stamps) if T0 + 2 < t <= T0 + 6]
    assert 0 < len(want) < len(times)
    for chosen in (("timestamp", "entry"), ()):
        cols = chosen_columns(pa.schema([PAYLOAD_FIELD]), chosen)
        out = pa.Table.from_batches([codec.batched_raw_batch(place, r, cols, times=tf) for r in rows])
        assert out.column("payload").to_pylist() == want
    assert batcher.stamped_ms == (int(stamps.min()), int(stamps.max()))


def test_arrow_entries_pass_or_fail_whole_by_their_time() -> None:
    clock = iter([T0 + 5, T0 + 7, T0 + 9])
    packer = ArrowEntryPacker(pa.schema([("x", pa.int64())]), 2, clock_ms=lambda: next(clock))
    batch = pa.RecordBatch.from_arrays([pa.array(range(6))], names=["x"])
    entries = list(packer.add(batch)) + list(packer.flush())
    assert [entry_append_ms(e) for e in entries] == [T0 + 5, T0 + 7, T0 + 9]
    assert packer.stamped_ms == (T0 + 5, T0 + 9)
    tf = time_filter([Condition("timestamp", "in", (at(T0 + 7), at(T0 + 9)))])
    place = RowPlace("a", 0, "0" * 32, T0)
    cols = chosen_columns(pa.schema([("x", pa.int64())]), ())  # no timestamp column returned
    got = [b for i, e in enumerate(entries) for b in codec.decode_arrow_entry(e, place, i, cols.schema, columns=cols, times=tf)]
    assert pa.Table.from_batches(got).column("x").to_pylist() == [2, 3, 4, 5]


# ---- the log record -------------------------------------------------------------------------------


def test_the_record_keeps_append_times_in_heads_and_segments_and_reads_older_ledgers() -> None:
    lg = ledger(0, T0, (T0 - 50, T0 - 1))
    d = ledger_to_json(lg)
    assert (d["appendMsMin"], d["appendMsMax"]) == (T0 - 50, T0 - 1)
    assert ledger_from_json(d) == lg
    assert decode_segment(encode_segment((lg, ledger(1, T0, None))), "seg") == (lg, ledger(1, T0, None))
    older = {k: v for k, v in d.items() if not k.startswith("append")}  # a ledger a release before wrote
    assert ledger_from_json(older).append_times_ms is None and "appendMsMin" not in ledger_to_json(ledger_from_json(older))
    newer = {**d, "someFutureKey": 1}
    assert ledger_to_json(ledger_from_json(newer)) == newer  # unknown keys still kept
    with pytest.raises(ValueError, match="not a range"):
        ledger(0, T0, (T0, T0 - 1))


def test_appending_and_sealing_record_the_times_once() -> None:
    rec = LogRecord("a").with_ledgers_appended([LedgerId(0, 1), LedgerId(0, 2)], [(1, 10), (1, 10)], [(T0, T0 + 1), None])
    assert [lg.append_times_ms for lg in rec.ledgers] == [(T0, T0 + 1), None]
    rec = rec.with_ledger(LedgerId(0, 3)).with_sealed(LedgerId(0, 3), 5, 50, append_times_ms=(T0 + 2, T0 + 9))
    assert rec.ledgers[-1].append_times_ms == (T0 + 2, T0 + 9)
    assert rec.with_sealed(LedgerId(0, 3), 5, 50, append_times_ms=(0, 1)).ledgers[-1].append_times_ms == (T0 + 2, T0 + 9)
    with pytest.raises(ValueError, match="time ranges"):
        LogRecord("a").with_ledgers_appended([LedgerId(0, 1)], [(1, 10)], [])
