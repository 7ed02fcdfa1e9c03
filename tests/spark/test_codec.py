"""Bulk entry verification and the Arrow entry packer, against the client's own entry codec."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from pyspark_ledger.datasource import codec
from pyspark_ledger.digest import Digest
from pyspark_ledger.entry_format import decode_entry, encode_entry

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


def test_raw_batch_ids_are_signed_bigints() -> None:
    b = codec.raw_batch(2**64 - 1, 2**63, 5, pa.array([b"a", b"b"], pa.binary()))
    assert b.schema == codec.RAW_ARROW_SCHEMA
    assert b.column("ledger_scope_id").to_pylist() == [-1, -1]
    assert b.column("ledger_id").to_pylist() == [-(2**63), -(2**63)]
    assert b.column("entry_id").to_pylist() == [5, 6]


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_packer_bounds_rows_and_round_trips(compression: str) -> None:
    schema = pa.schema([("id", pa.int64()), ("s", pa.string())])
    packer = codec.ArrowEntryPacker(schema, rows_max=300, compression=compression)
    out: list[pa.Buffer] = []
    for start in range(0, 1000, 170):  # batches that do not line up with entries
        n = min(170, 1000 - start)
        batch = pa.record_batch([pa.array(range(start, start + n), pa.int64()), pa.array([str(i) for i in range(start, start + n)])], schema=schema)
        out.extend(packer.add(batch))
    out.extend(packer.flush())
    assert len(out) == 4
    target = codec.arrow_read_schema(schema)
    ids: list[int] = []
    for entry_id, buf in enumerate(out):
        for b in codec.decode_arrow_entry(buf, 7, entry_id, target):
            assert b.schema == target and set(b.column("entry_id").to_pylist()) == {entry_id}
            ids.extend(b.column("id").to_pylist())
    assert ids == list(range(1000))


def test_packer_caps_entry_bytes() -> None:
    schema = pa.schema([("blob", pa.binary())])
    packer = codec.ArrowEntryPacker(schema, rows_max=1_000_000, bytes_target=64 * 1024)
    batch = pa.record_batch([pa.array([b"x" * 1000] * 1000, pa.binary())], schema=schema)
    out = list(packer.add(batch)) + list(packer.flush())
    assert len(out) >= 15 and all(buf.size < 80 * 1024 for buf in out)
