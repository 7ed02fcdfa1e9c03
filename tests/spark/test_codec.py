"""Verified payloads into rows (raw batches, Arrow entries) and the Arrow entry packer."""

from __future__ import annotations

import os
from datetime import UTC, datetime

import pyarrow as pa
import pytest

from pyspark_ledger.datasource.read import codec
from pyspark_ledger.datasource.rows import META_NAMES, RowPlace, arrow_read_schema
from pyspark_ledger.datasource.write.packer import COMPRESSION_RETRY_ENTRIES, ArrowEntryPacker

PLACE = RowPlace("events", 3, "f" * 32, 1_700_000_000_123)


def test_raw_batch_rows_say_where_they_are() -> None:
    b = codec.raw_batch(PLACE, 5, pa.array([b"a", b"b"], pa.binary()))
    assert b.schema == codec.RAW_ARROW_SCHEMA and b.schema.names == ["payload", *META_NAMES]
    assert b.to_pydict() == {
        "payload": [b"a", b"b"], "log": ["events"] * 2, "seq": [3, 3], "ledger": ["f" * 32] * 2, "entry": [5, 6],
        "index": [0, 0], "timestamp": [datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)] * 2,
    }
    alone = codec.raw_batch(RowPlace(None, None, "0" * 32, 0), 0, pa.array([b"x"], pa.binary()))
    assert alone.column("log").to_pylist() == [None] and alone.column("seq").to_pylist() == [None]


def test_arrow_entry_rows_keep_their_index_and_the_asked_slice() -> None:
    """An entry of several IPC batches: index counts rows across them; skip/keep cut inside."""
    schema = pa.schema([("id", pa.int64()), ("timestamp", pa.int64())])  # a data column shadows one
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as w:
        for lo, hi in ((0, 4), (4, 8), (8, 10)):
            w.write_batch(pa.record_batch([pa.array(range(lo, hi)), pa.array([9] * (hi - lo))], schema=schema))
    buf = sink.getvalue()
    target = arrow_read_schema(schema)
    assert target.names == ["id", "timestamp", "log", "seq", "ledger", "entry", "index", "_timestamp"]

    def rows(skip: int = 0, keep: int | None = None) -> list[tuple[int, int]]:
        batches = list(codec.decode_arrow_entry(buf, PLACE, 8, target, skip, keep))
        assert all(b.schema == target and set(b.column("entry").to_pylist()) == {8} for b in batches)
        return [(i, x) for b in batches for i, x in zip(b.column("id").to_pylist(), b.column("index").to_pylist())]

    assert rows() == [(i, i) for i in range(10)]
    assert rows(skip=5) == [(i, i) for i in range(5, 10)]
    assert rows(keep=6) == [(i, i) for i in range(6)]
    assert rows(skip=3, keep=8) == [(i, i) for i in range(3, 8)]
    assert rows(skip=10) == [] and rows(keep=0) == []


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_packer_bounds_rows_and_round_trips(compression: str) -> None:
    schema = pa.schema([("id", pa.int64()), ("s", pa.string())])
    packer = ArrowEntryPacker(schema, rows_max=300, compression=compression)
    out: list[pa.Buffer] = []
    for start in range(0, 1000, 170):  # batches that do not line up with entries
        n = min(170, 1000 - start)
        batch = pa.record_batch([pa.array(range(start, start + n), pa.int64()),
                                 pa.array([str(i) for i in range(start, start + n)])], schema=schema)
        out.extend(packer.add(batch))
    out.extend(packer.flush())
    assert len(out) == 4
    target = arrow_read_schema(schema)
    ids: list[int] = []
    for entry_id, buf in enumerate(out):
        for b in codec.decode_arrow_entry(buf, PLACE, entry_id, target):
            assert b.schema == target and set(b.column("entry").to_pylist()) == {entry_id}
            ids.extend(b.column("id").to_pylist())
    assert ids == list(range(1000))


def test_compression_is_kept_only_where_it_pays_and_is_retried_later() -> None:
    """Compressible entries are stored compressed; incompressible ones plain (readers then read
    them zero-copy), and compression is tried again after COMPRESSION_RETRY_ENTRIES entries, so
    data that turns compressible is compressed again. Every entry round-trips."""
    schema = pa.schema([("blob", pa.binary())])
    packer = ArrowEntryPacker(schema, rows_max=100, compression="lz4")
    retry = COMPRESSION_RETRY_ENTRIES

    def pack(rows: list[bytes]) -> list[pa.Buffer]:
        return list(packer.add(pa.record_batch([pa.array(rows, pa.binary())], schema=schema)))

    text = pack([b"abc" * 100] * 300)  # 3 entries, very compressible
    assert (packer.entries_compressed, packer.entries_plain) == (3, 0)
    assert all(buf.size < 100 * 300 / 10 for buf in text)
    noise = pack([os.urandom(300) for _ in range(100 * (retry + 1))])  # incompressible
    assert (packer.entries_compressed, packer.entries_plain) == (3, retry + 1)
    assert all(buf.size >= 100 * 300 for buf in noise)  # stored as they are
    text_again = pack([b"xyz" * 100] * 200)  # the next try at compression pays again
    assert (packer.entries_compressed, packer.entries_plain) == (5, retry + 1)
    target = arrow_read_schema(schema)
    got = [v for i, buf in enumerate(text + noise + text_again)
           for b in codec.decode_arrow_entry(buf, PLACE, i, target) for v in b.column("blob").to_pylist()]
    assert got[:300] == [b"abc" * 100] * 300 and got[-200:] == [b"xyz" * 100] * 200
    assert len(got) == 300 + 100 * (retry + 1) + 200


def test_packer_caps_entry_bytes() -> None:
    schema = pa.schema([("blob", pa.binary())])
    packer = ArrowEntryPacker(schema, rows_max=1_000_000, bytes_target=64 * 1024)
    batch = pa.record_batch([pa.array([b"x" * 1000] * 1000, pa.binary())], schema=schema)
    out = list(packer.add(batch)) + list(packer.flush())
    assert len(out) >= 15 and all(buf.size < 80 * 1024 for buf in out)
