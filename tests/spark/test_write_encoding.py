"""The pure parts of writing (no JVM): keyed raw entries framed and cut apart again, a batch split
by its `log` column, and the column checks' one-line errors (pyspark_ledger/datasource/write/columns.py)."""

from __future__ import annotations

import json
import pickle

import pyarrow as pa
import pytest

from pyspark_ledger.datasource.keyed_entries import KeyFramingError, frame, unframe
from pyspark_ledger.datasource.read.codec import raw_batch
from pyspark_ledger.datasource.rows import RowPlace, arrow_read_schema
from pyspark_ledger.datasource.write.columns import (
    RoutingError,
    WriteSchemaError,
    plan_layout,
    raw_keyed_schema_json,
)
from pyspark_ledger.datasource.write.encode import raw_entries, split_by_log


def test_keyed_entries_round_trip_with_null_empty_and_long_keys() -> None:
    keys = pa.array([b"k1", None, b"", b"x" * 70_000, "é".encode()], pa.binary())
    payloads = pa.array([b"p1", b"", b"p3", b"p4" * 1000, b""], pa.binary())
    framed = frame(keys, payloads)
    assert framed.to_pylist()[0] == b"\x00\x00\x00\x02k1p1"
    assert framed.to_pylist()[1] == b"\xff\xff\xff\xff"  # a null key, an empty payload
    got_keys, got_payloads = unframe(framed)
    assert got_keys.to_pylist() == keys.to_pylist() and got_payloads.to_pylist() == payloads.to_pylist()
    # A slice (an array with an offset into its buffers) cuts the same way.
    k, p = unframe(framed.slice(2, 2))
    assert k.to_pylist() == keys.to_pylist()[2:4] and p.to_pylist() == payloads.to_pylist()[2:4]


def test_string_keys_are_framed_as_utf8() -> None:
    framed = frame(pa.array(["ü", None]), pa.array([b"a", b"b"], pa.binary()))
    keys, _ = unframe(framed)
    assert keys.cast(pa.string()).to_pylist() == ["ü", None]


def test_entries_that_are_not_framed_are_refused() -> None:
    with pytest.raises(KeyFramingError, match="entry 1 of the run is 2 bytes, shorter than a key length"):
        unframe(pa.array([b"\x00\x00\x00\x00", b"ab"], pa.binary()))
    with pytest.raises(KeyFramingError, match="entry 0 of the run frames a 1633837924-byte key in 8 bytes"):
        unframe(pa.array([b"abcdefgh"], pa.binary()))


def test_an_unframed_entry_of_a_keyed_log_is_named_by_ledger_and_entry() -> None:
    keyed = arrow_read_schema(pa.schema([("key", pa.binary()), ("payload", pa.binary())]))
    stored = pa.concat_arrays([frame(pa.array([b"k"]), pa.array([b"p"], pa.binary())), pa.array([b"ab"], pa.binary())])
    place = RowPlace("events", 3, "0/17", 0)
    with pytest.raises(KeyFramingError) as err:
        raw_batch(place, 40, stored, keyed)
    assert str(err.value) == ("log 'events' ledger 0/17 entry 41 is 2 bytes, shorter than a key length (the log "
                              "records keys, but this entry was appended without the framing, e.g. by a LogWriter)")
    assert str(pickle.loads(pickle.dumps(err.value))) == str(err.value)  # as it crosses processes
    assert raw_batch(place, 40, stored.slice(0, 1), keyed).column(0).to_pylist() == [b"k"]


def test_raw_entries_of_a_batch() -> None:
    batch = pa.RecordBatch.from_pydict({"key": pa.array([b"a", None], pa.binary()),
                                        "payload": pa.array([b"1", b"2"], pa.binary())})
    assert raw_entries(batch, keyed=False) == [b"1", b"2"]
    assert raw_entries(batch, keyed=True) == [b"\x00\x00\x00\x01a1", b"\xff\xff\xff\xff2"]


def test_split_by_log_keeps_each_logs_rows_in_order_and_drops_the_column() -> None:
    batch = pa.RecordBatch.from_pydict({"log": ["b", "a", "b", "c", "a"], "v": [0, 1, 2, 3, 4]})
    parts = {name: rows for name, rows in split_by_log(batch)}
    assert sorted(parts) == ["a", "b", "c"]
    assert {n: r.column("v").to_pylist() for n, r in parts.items()} == {"a": [1, 4], "b": [0, 2], "c": [3]}
    assert all(r.schema.names == ["v"] for r in parts.values())
    one = split_by_log(pa.RecordBatch.from_pydict({"log": ["a", "a"], "v": [1, 2]}))
    assert [(n, r.num_rows) for n, r in one] == [("a", 2)]


def test_split_by_log_refuses_a_null_or_impossible_log() -> None:
    with pytest.raises(RoutingError, match=r"column `log` is null in a row \(row 1 of a batch\)"):
        split_by_log(pa.RecordBatch.from_pydict({"log": ["a", None], "v": [1, 2]}))
    with pytest.raises(RoutingError, match="column `log` names a log that cannot exist: bad log name 'a/b'"):
        split_by_log(pa.RecordBatch.from_pydict({"log": ["a/b"], "v": [1]}))


def _schema(*fields: tuple[str, str]) -> str:
    return json.dumps({"fields": [{"metadata": {}, "name": n, "nullable": True, "type": t} for n, t in fields],
                       "type": "struct"}, sort_keys=True, separators=(",", ":"))


def test_layouts() -> None:
    raw = plan_layout("raw", ["payload"], {"payload": "binary"}, _schema(("payload", "binary")), "x")
    assert (raw.routed, raw.key_type, raw.schema_json) == (False, None, None)
    keyed = plan_layout("raw", ["log", "key", "payload"], {"log": "string", "key": "string", "payload": "binary"},
                        "{}", None)
    assert keyed.routed and keyed.key_type == "string" and keyed.schema_json == raw_keyed_schema_json("string")
    arrow = plan_layout("arrow", ["log", "id"], {"log": "string", "id": "bigint"},
                        _schema(("log", "string"), ("id", "long")), None)
    assert arrow.schema_json == _schema(("id", "long"))  # the routing column is not stored


def test_layout_errors_name_the_column() -> None:
    with pytest.raises(WriteSchemaError, match=r"^column `key` is int but raw keys are binary or string"):
        plan_layout("raw", ["key", "payload"], {"key": "int", "payload": "binary"}, "{}", "x")
    with pytest.raises(WriteSchemaError, match=r"^column `log` is int but it routes each row"):
        plan_layout("arrow", ["log"], {"log": "int"}, _schema(("log", "integer")), None)
    with pytest.raises(RoutingError, match=r"^option log \('x'\) and a `log` column both say where rows go"):
        plan_layout("arrow", ["log", "v"], {"log": "string", "v": "int"}, _schema(("log", "string"), ("v", "integer")), "x")
