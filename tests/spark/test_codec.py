"""Bulk entry verification and the Arrow entry packer, against the client's own entry codec."""

from __future__ import annotations

import os
import random
from datetime import UTC, datetime

import crc32c
import numpy as np
import pyarrow as pa
import pytest

from pyspark_ledger.datasource import codec
from pyspark_ledger.datasource.rows import META_NAMES, RowPlace, arrow_read_schema
from pyspark_ledger.protocol.digest import Digest
from pyspark_ledger.protocol.entry_format import HEADER_BYTES, decode_entry, encode_entry

SEED = 20261121


def entries(digest: Digest, first: int, payloads: list[bytes], scope: int = 0, lid: int = 9) -> list[bytes]:
    out, length = [], 0
    for i, p in enumerate(payloads):
        length += len(p)
        out.append(encode_entry(digest, scope, lid, first + i, first + i - 1, length, p))
    return out


@pytest.mark.parametrize("digest_type", ["crc32c", "mac", "none"])
def test_decode_run_matches_decode_entry(digest_type: str) -> None:
    rnd = random.Random(SEED)
    print(f"seed={SEED}")
    d = Digest.for_ledger(digest_type, b"pw")
    payloads = [rnd.randbytes(rnd.randrange(0, 300)) for _ in range(500)]
    stored = entries(d, 40, payloads, scope=2**63 + 5)
    run = codec.decode_run(d, 2**63 + 5, 9, 40, stored)
    assert run.error is None and run.count == 500
    assert run.payloads.to_pylist() == [decode_entry(d, x, 2**63 + 5, 9, 40 + i).payload for i, x in enumerate(stored)]


@pytest.mark.parametrize("damage", ["payload bit", "entry id", "ledger id", "truncated", "flags"])
def test_decode_run_stops_at_the_first_bad_entry(damage: str) -> None:
    d = Digest.for_ledger("crc32c")
    stored = entries(d, 0, [bytes([i]) * 50 for i in range(100)])
    bad = bytearray(stored[37])
    if damage == "payload bit":
        bad[-1] ^= 0x01
    elif damage == "entry id":
        bad = bytearray(encode_entry(d, 0, 9, 38, 0, 0, bytes(50)))
    elif damage == "ledger id":
        bad = bytearray(encode_entry(d, 0, 8, 37, 0, 0, bytes(50)))
    elif damage == "truncated":
        bad = bad[:20]
    else:
        bad[0] ^= 0x10
    stored[37] = bytes(bad)
    run = codec.decode_run(d, 0, 9, 0, stored)
    assert run.count == 37 and run.error is not None and run.error.startswith("entry 37:")
    assert run.payloads.to_pylist() == [bytes([i]) * 50 for i in range(37)]
    bufs, error = codec.decode_each(d, 0, 9, 0, stored)
    assert len(bufs) == 37 and error is not None and error.startswith("entry 37:")
    assert [b.to_pybytes() for b in bufs] == [bytes([i]) * 50 for i in range(37)]


@pytest.mark.parametrize("digest_type", ["crc32c", "mac", "none"])
def test_decode_each_matches_decode_entry(digest_type: str) -> None:
    d = Digest.for_ledger(digest_type, b"pw")
    payloads = [bytes([i % 256]) * (i * 37) for i in range(60)]
    stored = entries(d, 5, payloads, scope=3, lid=2**64 - 1)
    bufs, error = codec.decode_each(d, 3, 2**64 - 1, 5, stored)
    assert error is None
    assert [b.to_pybytes() for b in bufs] == [decode_entry(d, x, 3, 2**64 - 1, 5 + i).payload for i, x in enumerate(stored)]
    wrong = Digest.for_ledger(digest_type, b"other")
    if digest_type == "mac":
        assert codec.decode_each(wrong, 3, 2**64 - 1, 5, stored)[1] == "entry 5: digest mismatch (wrong password?)"


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
    packer = codec.ArrowEntryPacker(schema, rows_max=300, compression=compression)
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
    packer = codec.ArrowEntryPacker(schema, rows_max=100, compression="lz4")
    retry = codec.COMPRESSION_RETRY_ENTRIES

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
    packer = codec.ArrowEntryPacker(schema, rows_max=1_000_000, bytes_target=64 * 1024)
    batch = pa.record_batch([pa.array([b"x" * 1000] * 1000, pa.binary())], schema=schema)
    out = list(packer.add(batch)) + list(packer.flush())
    assert len(out) >= 15 and all(buf.size < 80 * 1024 for buf in out)


# ---- runs as a bookie sends them: one buffer plus lengths ---------------------------------------------


def blob_of(stored: list[bytes]) -> tuple[bytes, np.ndarray]:
    return b"".join(stored), np.array([len(x) for x in stored], dtype=np.int64)


@pytest.mark.parametrize("digest_type", ["crc32c", "mac", "none"])
@pytest.mark.parametrize("sizes", ["equal", "mixed"])
def test_decode_blob_matches_decode_entry(digest_type: str, sizes: str) -> None:
    rnd = random.Random(SEED)
    d = Digest.for_ledger(digest_type, b"pw")
    # 1,500 entries: enough for the one-pass crc check of equal sizes (bookie.crc_batch.PIECES_MIN)
    payloads = [rnd.randbytes(100 if sizes == "equal" else rnd.randrange(0, 300)) for _ in range(1_500)]
    stored = entries(d, 2**40, payloads, scope=2**64 - 1, lid=2**63)
    run = codec.decode_blob(d, 2**64 - 1, 2**63, 2**40, *blob_of(stored))
    assert run.error is None and run.count == 1_500
    assert run.payloads.to_pylist() == [
        decode_entry(d, x, 2**64 - 1, 2**63, 2**40 + i).payload for i, x in enumerate(stored)]


@pytest.mark.parametrize("sizes", ["equal", "mixed"])
@pytest.mark.parametrize("damage, why", [
    ("payload bit", "digest mismatch"),
    ("digest byte", "digest mismatch"),
    ("lac byte", "digest mismatch"),  # a header byte outside the fixed prefix: only the crc sees it
    ("length byte", "digest mismatch"),
    ("entry id", "bytes belong to entry 1038 of ledger 00000000000000000000000000000009"),
    ("ledger id", "bytes belong to entry 1037 of ledger 00000000000000000000000000000019"),
    ("flags", "unsupported entry format or digest"),
])
@pytest.mark.parametrize("batched", [False, True], ids=["crc per entry", "crcs checked at once"])
def test_a_bad_entry_in_the_middle_of_a_run_is_named(sizes: str, damage: str, why: str, batched: bool,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    if batched:  # bookie.crc_batch's one-pass check (for equal sizes), which 100 entries are too few for
        monkeypatch.setattr(codec, "PIECES_MIN", 1)
    d = Digest.for_ledger("crc32c")
    payloads = [bytes([i]) * (50 if sizes == "equal" else 20 + i) for i in range(100)]
    stored = entries(d, 1000, payloads)
    bad = bytearray(stored[37])
    at = {"payload bit": len(bad) - 1, "digest byte": HEADER_BYTES + 1, "lac byte": 30, "length byte": 40,
          "ledger id": 16, "flags": 0}.get(damage)
    if damage == "entry id":
        bad = bytearray(encode_entry(d, 0, 9, 1038, 0, 0, payloads[37]))
    else:
        bad[at] ^= 0x10
    stored[37] = bytes(bad)
    run = codec.decode_blob(d, 0, 9, 1000, *blob_of(stored))
    assert run.count == 37 and run.error is not None
    assert run.error.startswith(f"entry 1037: {why}"), run.error
    assert run.payloads.to_pylist() == payloads[:37]


@pytest.mark.parametrize("lengths, why", [
    ([], "a run with no entries"),
    ([10, -10], "a run with a negative entry length"),
    ([45, 45], "a run's lengths add up to 90 bytes but it carries 91"),
])
def test_a_malformed_run_verifies_nothing_and_says_why(lengths: list[int], why: str) -> None:
    run = codec.decode_blob(Digest.for_ledger("crc32c"), 0, 9, 0, bytes(91) if lengths else b"",
                            np.array(lengths, dtype=np.int64))
    assert run.count == 0 and run.error == why


def test_an_entry_shorter_than_a_header_ends_the_run() -> None:
    d = Digest.for_ledger("crc32c")
    stored = entries(d, 0, [b"x" * 10] * 5)
    stored[3] = stored[3][:30]
    run = codec.decode_blob(d, 0, 9, 0, *blob_of(stored))
    assert run.count == 3 and run.error == "entry 3: 30 bytes is shorter than a header and digest"


@pytest.mark.parametrize("size", [1, 4, 41, 64])
def test_crc32c_rows_matches_crc32c(size: int) -> None:
    rnd = random.Random(SEED + size)
    rows = np.frombuffer(rnd.randbytes(300 * size), dtype=np.uint8).reshape(300, size)
    assert codec.crc32c_rows(rows).tolist() == [crc32c.crc32c(r.tobytes()) for r in rows]
    prefix = rnd.randbytes(size // 2)
    rows = rows.copy()
    rows[:, : len(prefix)] = np.frombuffer(prefix, dtype=np.uint8)
    assert codec.crc32c_rows(rows, prefix).tolist() == [crc32c.crc32c(r.tobytes()) for r in rows]
