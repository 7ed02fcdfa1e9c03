"""Batched raw rows without a JVM: packing rows into message batches (write/batch_pack.py) is
encode_batch's format, and unpacking them (read/batch_unpack.py) gives back every row in order
with its entry and index."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from pyspark_ledger.datasource.read.batch_unpack import grouped, unpack_entry
from pyspark_ledger.datasource.write.batch_pack import BatchLimits, cut_points, pack_batches
from pyspark_ledger.datasource.write.encode import RawBatcher
from pyspark_ledger.errors import EntryFormatError
from pyspark_ledger.protocol.message_batch import decode_batch, encode_batch


@pytest.mark.parametrize("seed", range(5))
def test_pack_is_encode_batch_and_unpack_gives_every_row_back(seed: int) -> None:
    print("seed", seed)
    rnd = random.Random(seed)
    n = rnd.randint(1, 3000)
    rows = [rnd.randbytes(rnd.randint(0, 200)) for _ in range(n)]
    keyed = seed % 2 == 1
    keys = [None if rnd.random() < 0.2 else rnd.randbytes(rnd.randint(0, 8)) for _ in range(n)] if keyed else None
    cut = rnd.randint(0, n - 1)
    payloads = pa.array(rows, pa.binary()).slice(cut)  # a slice: offsets that do not start at 0
    key_array = pa.array(keys, pa.binary()).slice(cut) if keys is not None else None
    limits = BatchLimits(rnd.randint(1, 500), rnd.randint(100, 20_000))
    batches, used = pack_batches(payloads, key_array, 42, limits)
    assert used == n - cut
    at = cut
    unpacked = []
    for entry_id, b in enumerate(batches):
        decoded = decode_batch(b)
        assert decoded.count <= limits.max_messages
        assert decoded.count == 1 or len(b) <= limits.max_bytes
        assert b == encode_batch(rows[at:at + decoded.count], [42] * decoded.count,
                                 keys=keys[at:at + decoded.count] if keys is not None else None)
        at += decoded.count
        unpacked.append(unpack_entry(pa.py_buffer(b), entry_id))
    assert at == n
    out = list(grouped(unpacked, rows_target=rnd.randint(1, 2000)))
    assert pa.concat_arrays([o.payloads for o in out]).to_pylist() == rows[cut:]
    if keys is not None:
        assert pa.concat_arrays([o.keys for o in out]).to_pylist() == keys[cut:]
    entries = np.concatenate([o.entries for o in out])
    index = np.concatenate([o.index for o in out])
    assert list(zip(entries.tolist(), index.tolist())) == [(e, i) for e, b in enumerate(batches)
                                                           for i in range(decode_batch(b).count)]


def test_a_read_inside_an_entry_slices_it() -> None:
    b = pa.py_buffer(encode_batch([b"a", b"b", b"c", b"d"], [1] * 4))
    rows = unpack_entry(b, 9, skip=1, keep=3)
    assert rows.payloads.to_pylist() == [b"b", b"c"] and rows.first_index == 1
    (out,) = grouped([rows, unpack_entry(b, 10, skip=4)])
    assert out.index.tolist() == [1, 2] and out.entries.tolist() == [9, 9]


def test_a_writer_fills_its_last_batch_with_the_next_rows() -> None:
    batcher = RawBatcher(keyed=False, limits=BatchLimits(4, 10**6))
    rows = [b"r%d" % i for i in range(11)]
    first = batcher.add(pa.RecordBatch.from_pydict({"payload": pa.array(rows[:6], pa.binary())}), 1)
    assert [decode_batch(b).payloads() for b in first] == [rows[:4]]  # rows 4, 5 wait
    second = batcher.add(pa.RecordBatch.from_pydict({"payload": pa.array(rows[6:], pa.binary())}), 1)
    assert [decode_batch(b).payloads() for b in second] == [rows[4:8]]
    assert [decode_batch(b).payloads() for b in batcher.flush(1)] == [rows[8:]] and batcher.flush(1) == []
    _, held = pack_batches(pa.array(rows, pa.binary()), None, 1, BatchLimits(4, 10**6), hold_last=True)
    assert held == 8


def test_cut_points_bound_messages_and_bytes() -> None:
    assert cut_points(np.array([10] * 10), BatchLimits(3, 10**6)) == [3, 6, 9, 10]
    assert cut_points(np.array([10] * 10), BatchLimits(100, 8 + 25)) == [2, 4, 6, 8, 10]
    assert cut_points(np.array([500, 1, 1]), BatchLimits(100, 100)) == [1, 3]


def test_a_damaged_batch_is_refused() -> None:
    b = encode_batch([b"abc"], [1])
    with pytest.raises(EntryFormatError):
        unpack_entry(pa.py_buffer(b[:-1]), 0)
