"""Per-row times and headers of batched raw rows without a JVM (issue 32 item 4): read/batch_unpack.py
gives each message's append time, event time and headers as arrays (headers as
list<struct<key, value>>, zero-copy over the entry), joined across entries; the codec makes the
`timestamp` column from them (append time, or event time with timestampSource=event where a
message has one) and the `headers` column (includeHeaders); unbatched rows keep their ledger's
time and have no headers. Seeded: every row compared with the batch's own decode."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from pyspark_ledger.datasource.read.batch_unpack import grouped, unpack_entry
from pyspark_ledger.datasource.read.codec import batched_raw_batch, raw_batch
from pyspark_ledger.datasource.read.columns import ReadSchemaError, chosen_columns, user_columns
from pyspark_ledger.datasource.rows import META_NAMES, PAYLOAD_FIELD, RowPlace
from pyspark_ledger.datasource.write.batch_pack import BatchLimits, Stamps, pack_batches
from pyspark_ledger.log.batching import OpenBatch
from pyspark_ledger.protocol.message_batch import NO_TIME, MessageBoundError, decode_batch, encode_batch

PLACE = RowPlace("events", 3, "0" * 32, 1_000)
SPARK_HEADERS = pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())])))


Entry = tuple[list[bytes], list[int], list[int] | None, list[list[tuple[str, bytes]]] | None]


def seeded_entries(rnd: random.Random) -> list[Entry]:
    out = []
    for e in range(rnd.randint(1, 6)):
        n = rnd.randint(1, 50)
        payloads = [rnd.randbytes(rnd.randint(0, 20)) for _ in range(n)]
        append = [10_000 + 100 * e + i // 7 for i in range(n)]
        event = [NO_TIME if rnd.random() < 0.3 else rnd.randint(0, 5_000) for _ in range(n)] if rnd.random() < 0.6 else None
        shape = rnd.random()
        if shape < 0.2:  # a producer's constant headers
            headers: list[list[tuple[str, bytes]]] | None = [[("trace", b"t"), ("ü", b"")]] * n
        elif shape < 0.4:  # the same keys, a value of its own each
            headers = [[("trace", rnd.randbytes(rnd.randint(0, 5)))] for _ in range(n)]
        elif shape < 0.7:
            headers = [[(rnd.choice(("a", "b", "ü")), rnd.randbytes(rnd.randint(0, 5))) for _ in range(rnd.randint(0, 3))]
                       for _ in range(n)]
        else:
            headers = None
        out.append((payloads, append, event, headers))
    return out


def log_writer_batch(payloads: list[bytes], append_ms: int, event: list[int] | None,
                     headers: list[list[tuple[str, bytes]]] | None) -> bytes:
    """The entry a LogWriter makes of the messages (the short layout, one append time)."""
    b = OpenBatch(0.0)
    for i, p in enumerate(payloads):
        b.add(p, None, None if event is None or event[i] == NO_TIME else event[i], None if headers is None else headers[i])
    return b.encode(append_ms)


@pytest.mark.parametrize("layout", ["plain", "log_writer"])
@pytest.mark.parametrize("seed", range(8))
def test_times_and_headers_of_every_row(seed: int, layout: str) -> None:
    print("seed", seed, layout)
    rnd = random.Random(seed)
    entries = seeded_entries(rnd)
    if layout == "log_writer":  # one append time per batch, as a LogWriter stamps it
        entries = [(p, [a[0]] * len(a), ev, h) for p, a, ev, h in entries]
        bufs = [pa.py_buffer(log_writer_batch(p, a[0], ev, h)) for p, a, ev, h in entries]
    else:
        bufs = [pa.py_buffer(encode_batch(p, a, event_ms=ev, headers=h)) for p, a, ev, h in entries]
    skip = rnd.randint(0, len(entries[0][0]) - 1)
    rows = list(grouped((unpack_entry(b, i, skip if i == 0 else 0) for i, b in enumerate(bufs)), rows_target=40))
    want = [(p, a, ev[i] if ev is not None else NO_TIME, h[i] if h is not None else [])
            for k, (ps, a_s, ev, h) in enumerate(entries) for i, (p, a) in enumerate(zip(ps, a_s)) if k or i >= skip]
    for event in (False, True):
        schema = chosen_columns(pa.schema([PAYLOAD_FIELD]), META_NAMES, headers=True).schema
        spark_schema = pa.schema([*list(schema)[:-1], pa.field("headers", SPARK_HEADERS)])  # as Spark names it
        cols = user_columns(pa.schema([PAYLOAD_FIELD]), spark_schema, event_time=event)
        got = pa.Table.from_batches([batched_raw_batch(PLACE, r, cols) for r in rows]).to_pylist()
        assert [g["payload"] for g in got] == [w[0] for w in want]
        stamps = [round(g["timestamp"].timestamp() * 1000) for g in got]
        assert stamps == [w[2] if event and w[2] != NO_TIME else w[1] for w in want]
        assert [[(h["key"], h["value"]) for h in g["headers"]] for g in got] == [w[3] for w in want]


def test_unbatched_rows_keep_the_ledger_time_and_have_no_headers() -> None:
    cols = chosen_columns(pa.schema([PAYLOAD_FIELD]), ("entry", "timestamp"), headers=True)
    got = raw_batch(PLACE, 5, pa.array([b"x", b"y"]), cols.schema, columns=cols).to_pylist()
    assert [(g["entry"], round(g["timestamp"].timestamp() * 1000), g["headers"]) for g in got] == [(5, 1000, []), (6, 1000, [])]


def test_a_headers_column_of_another_type_is_refused() -> None:
    bad = pa.schema([PAYLOAD_FIELD, pa.field("headers", pa.list_(pa.string()))])
    with pytest.raises(ReadSchemaError, match="array<struct<key: string, value: binary>>"):
        user_columns(pa.schema([PAYLOAD_FIELD]), bad)


def test_headers_stay_views_of_the_entry() -> None:
    buf = pa.py_buffer(encode_batch([b"p"] * 3, [1, 2, 3], headers=[[("k", b"v1")], [], [("k", b"v2"), ("k", b"v3")]]))
    rows = unpack_entry(buf, 0)
    assert rows.headers is not None and rows.headers.values.field(1).buffers()[2].address == buf.address
    assert np.array_equal(rows.append_ms, [1, 2, 3])


@pytest.mark.parametrize("seed", range(6))
def test_raw_writes_pack_event_times_and_headers_as_encode_batch_does(seed: int) -> None:
    """write/batch_pack.py's bulk columns are byte for byte message_batch.encode_batch's."""
    print("seed", seed)
    rnd = random.Random(seed)
    n = rnd.randint(1, 400)
    payloads = [rnd.randbytes(rnd.randint(0, 30)) for _ in range(n)]
    keys = [None if rnd.random() < 0.3 else rnd.randbytes(3) for _ in range(n)] if seed % 2 else None
    events = [NO_TIME if rnd.random() < 0.3 else rnd.randint(-10**12, 10**13) for _ in range(n)]
    headers = [[(rnd.choice(("a", "bb", "ü")), rnd.randbytes(rnd.randint(0, 9))) for _ in range(rnd.randint(0, 4))]
               for _ in range(n)]
    cut = rnd.randint(0, n - 1)  # sliced arrays: offsets that do not start at 0
    h_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    h_arr = pa.array([[{"key": k, "value": v} for k, v in hs] for hs in headers], h_type).slice(cut)
    stamps = Stamps(np.array(events[cut:], dtype=np.int64), h_arr)
    limits = BatchLimits(rnd.randint(1, 60), rnd.randint(200, 5_000))
    k_arr = pa.array(keys, pa.binary()).slice(cut) if keys is not None else None
    batches, used = pack_batches(pa.array(payloads, pa.binary()).slice(cut), k_arr, 7, limits, stamps=stamps)
    assert used == n - cut
    at = cut
    for b in batches:
        m = decode_batch(b).count
        assert b == encode_batch(payloads[at:at + m], [7] * m, keys=keys[at:at + m] if keys is not None else None,
                                 event_ms=events[at:at + m], headers=headers[at:at + m])
        at += m
    assert at == n


def test_raw_write_header_bounds_are_named() -> None:
    h_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    too_many = pa.array([[{"key": "k", "value": b""}] * 65], h_type)
    with pytest.raises(MessageBoundError, match="HEADERS_PER_MESSAGE_MAX"):
        pack_batches(pa.array([b"p"]), None, 1, BatchLimits(), stamps=Stamps(None, too_many))
    null_key = pa.array([[{"key": None, "value": b""}]], h_type)
    with pytest.raises(ValueError, match="header key or value is null"):
        pack_batches(pa.array([b"p"]), None, 1, BatchLimits(), stamps=Stamps(None, null_key))
