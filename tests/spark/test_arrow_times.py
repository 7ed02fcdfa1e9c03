"""Arrow logs' per-entry append time (issue 32 item 4; protocol/arrow_times.py), without a JVM:
the packer stamps each entry with the time it packs it, never stepping back; a read gives every
row of an entry that entry's time, and an entry written before times its ledger's join time; the
search by time bisects a timed Arrow ledger's entries; an offloaded Arrow file keeps the times.
Through Spark: test_arrow_times_spark.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from metadata.ids import LedgerId
from metadata.log_record import LogLedger
from pyspark_ledger.datasource.read import codec
from pyspark_ledger.datasource.read.meta_columns import MetaColumns
from pyspark_ledger.datasource.rows import RowPlace, arrow_read_schema
from pyspark_ledger.datasource.write.packer import ArrowEntryPacker
from pyspark_ledger.log.time_lookup import position_in_ledger
from pyspark_ledger.offload.parquet_files import LedgerFile, write_ledger_file
from pyspark_ledger.protocol.arrow_times import (
    APPEND_MS_KEY,
    TIMED_LEDGER_KEY,
    TIMED_LEDGER_VALUE,
    ArrowTimeError,
    entry_append_ms,
    stamped_schema,
)
from pyspark_ledger.protocol.entry_format import Entry

SCHEMA = pa.schema([("id", pa.int64())])
JOINED_MS = 1_700_000_999_000  # the ledger's join time: later than its entries (a job commits after its tasks)
PLACE = RowPlace("events", 3, "f" * 32, JOINED_MS)
LID = LedgerId(0, 42)


def packed(times: list[int], rows: int = 4) -> list[bytes]:
    """Entries of `rows` rows each, the clock reading `times` in turn."""
    clock = iter(times)
    packer = ArrowEntryPacker(SCHEMA, rows, clock_ms=lambda: next(clock))
    out = []
    for i in range(len(times)):
        out += [b.to_pybytes() for b in packer.add(pa.record_batch([pa.array(range(i * rows, (i + 1) * rows))],
                                                                   schema=SCHEMA))]
    return out


def unstamped(ids: range) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, SCHEMA) as w:
        w.write_batch(pa.record_batch([pa.array(ids)], schema=SCHEMA))
    return sink.getvalue().to_pybytes()


def row_times(payload: bytes, entry_id: int, meta: MetaColumns | None = None, **cut: Any) -> list[int]:
    batches = codec.decode_arrow_entry(pa.py_buffer(payload), PLACE, entry_id, arrow_read_schema(SCHEMA), meta=meta, **cut)
    return [round(t.timestamp() * 1000) for b in batches for t in b.column("timestamp").to_pylist()]


def test_each_entry_carries_the_time_it_was_packed_and_never_steps_back() -> None:
    entries = packed([1_700_000_000_000, 1_700_000_000_500, 1_700_000_000_200, 1_700_000_001_000])
    assert [entry_append_ms(e) for e in entries] == [1_700_000_000_000, 1_700_000_000_500, 1_700_000_000_500,
                                                     1_700_000_001_000]
    assert entry_append_ms(unstamped(range(3))) is None
    # Any Arrow IPC reader (and a release before times) reads the entry as before.
    assert pa.ipc.open_stream(entries[1]).read_all().column("id").to_pylist() == [4, 5, 6, 7]


@pytest.mark.parametrize("cached", [False, True])
def test_rows_get_their_entry_time_and_older_entries_the_ledger_time(cached: bool) -> None:
    meta = MetaColumns(PLACE) if cached else None
    e0, e1 = packed([1_700_000_000_000, 1_700_000_000_700])
    assert row_times(e0, 0, meta) == [1_700_000_000_000] * 4
    assert row_times(e1, 1, meta, skip_rows=1, keep_rows=3) == [1_700_000_000_700] * 2
    assert row_times(unstamped(range(5)), 2, meta) == [JOINED_MS] * 5  # written before times
    assert row_times(e0, 0, meta) == [1_700_000_000_000] * 4  # the cache is not left with an entry's time


def test_a_time_that_is_not_one_is_refused_by_name() -> None:
    for bad in (b"soon", b"-5", b"9" * 40, b""):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, SCHEMA.with_metadata({APPEND_MS_KEY: bad})) as w:
            w.write_batch(pa.record_batch([pa.array([1])], schema=SCHEMA))
        with pytest.raises(ArrowTimeError, match="append time .* is not ms since the epoch"):
            row_times(sink.getvalue().to_pybytes(), 0)
    with pytest.raises(ArrowTimeError):
        stamped_schema(SCHEMA, -1)


class Handle:
    """A ReadHandle over a list of entries: counts the reads a search makes."""

    def __init__(self, payloads: list[bytes], timed: bool):
        self.payloads = payloads
        self.metadata = SimpleNamespace(custom={TIMED_LEDGER_KEY: TIMED_LEDGER_VALUE} if timed else {})
        self.reads = 0

    def read_entries(self, first: int, last: int) -> list[Entry]:
        self.reads += 1
        return [Entry(i, self.payloads[i]) for i in range(first, last + 1)]


def test_the_search_by_time_bisects_a_timed_ledger_and_passes_an_old_one_whole() -> None:
    times = [1_700_000_000_000 + 100 * k for k in range(32)]
    h = Handle(packed(times, rows=2), timed=True)
    lg = LogLedger(5, LID, JOINED_MS)
    brute = {t: next(k for k, tk in enumerate(times) if tk >= t) for t in (times[0] - 1, times[7], times[7] + 1, times[-1])}
    for t, k in brute.items():
        at = position_in_ledger(h, lg, len(times) - 1, t)
        assert at is not None and (at.seq, at.entry_id, at.index) == (5, k, 0), (t, at)
    assert position_in_ledger(h, lg, len(times) - 1, times[-1] + 1) is None
    assert h.reads <= 8 * (len(brute) + 1)  # bisected: a few reads per search, not one per entry
    old = Handle([unstamped(range(2))] * 4, timed=False)  # before times: the ledger's join time, no read
    at = position_in_ledger(old, lg, 3, JOINED_MS)
    assert at is not None and (at.entry_id, at.index) == (0, 0) and old.reads == 0
    assert position_in_ledger(old, lg, 3, JOINED_MS + 1) is None


def test_an_offloaded_arrow_ledger_keeps_each_entry_time() -> None:
    stamped = packed([1_700_000_000_000, 1_700_000_000_300, 1_700_000_000_900])
    entries = [Entry(0, unstamped(range(2))), *(Entry(i + 1, p) for i, p in enumerate(stamped))]
    data, facts = write_ledger_file("log", 0, LID, "arrow", JOINED_MS, entries)
    assert facts.entry_times == (None, 1_700_000_000_000, 1_700_000_000_300, 1_700_000_000_900)
    lf = LedgerFile(pa.py_buffer(data), "t")
    assert lf.facts == facts
    back = list(lf.entries(0, 3))
    assert [entry_append_ms(e.payload) for e in back] == list(facts.entry_times)
    assert [pa.ipc.open_stream(e.payload).read_all() for e in back] == \
        [pa.ipc.open_stream(e.payload).read_all() for e in entries]
    old, _ = write_ledger_file("log", 0, LID, "arrow", JOINED_MS, [Entry(0, unstamped(range(2)))])
    assert LedgerFile(pa.py_buffer(old), "t").facts.entry_times == ()  # a file as before times
