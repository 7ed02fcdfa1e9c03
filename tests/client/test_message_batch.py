"""Message batches (entry format 3): the shipped vectors, every bound by name, every way the
framing can be wrong, seeded round trips, and what stays as it was for format 2."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from metadata import LedgerId
from metadata.log_record import LogRecord, decode, encode, from_json_dict, to_json_dict
from pyspark_ledger.errors import EntryFormatError
from pyspark_ledger.log import Position
from pyspark_ledger.log.batching import OpenBatch
from pyspark_ledger.protocol import message_batch as mb
from pyspark_ledger.protocol.digest import Digest
from pyspark_ledger.protocol.entry_format import (
    BATCH_FORMAT_VERSION,
    ENTRY_FORMAT_KEY,
    FORMAT_VERSION,
    decode_entry,
    encode_copy,
    encode_entry,
    entry_encoder,
    entry_format_of_ledger,
)

VECTORS = json.loads((Path(__file__).resolve().parents[1] / "vectors" / "entry_format_v3.json").read_text())["cases"]


def _columns(msgs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = [None if m.get("key_hex") is None else bytes.fromhex(m["key_hex"]) for m in msgs] \
        if any("key_hex" in m for m in msgs) else None
    events = [mb.NO_TIME if m.get("event_time_ms") is None else m["event_time_ms"] for m in msgs] \
        if any(m.get("event_time_ms") is not None for m in msgs) else None
    headers = [[(k, bytes.fromhex(v)) for k, v in m.get("headers", [])] for m in msgs] \
        if any(m.get("headers") for m in msgs) else None
    return {"keys": keys, "event_ms": events, "headers": headers}


def _log_writer_batch(payloads: list[bytes], msgs: list[dict[str, Any]]) -> bytes:
    """What a LogWriter's batch makes of the messages (the short layout: layout bits 3-6)."""
    b = OpenBatch(0.0)
    for p, m in zip(payloads, msgs):
        b.add(p, None if m.get("key_hex") is None else bytes.fromhex(m["key_hex"]), m.get("event_time_ms"),
              [(k, bytes.fromhex(v)) for k, v in m.get("headers", [])])
    assert len({m["append_time_ms"] for m in msgs}) == 1, "a LogWriter's batch has one append time"
    data = b.encode(msgs[0]["append_time_ms"])
    assert len(data) <= b.size_bytes
    return data


@pytest.mark.parametrize("case", VECTORS, ids=lambda c: c["name"])
def test_vectors(case: dict[str, Any]) -> None:
    msgs = case["messages"]
    payloads = [bytes.fromhex(m["payload_hex"]) for m in msgs]
    if case.get("layout") == "log_writer":
        batch = _log_writer_batch(payloads, msgs)
    else:
        batch = mb.encode_batch(payloads, [m["append_time_ms"] for m in msgs], **_columns(msgs))
    assert batch.hex() == case["batch_hex"]
    d = Digest.for_ledger(case["digest_type"], bytes.fromhex(case["password_hex"]))
    args = (case["scope_id"], case["ledger_id"])
    encoded = encode_entry(d, *args, case["entry_id"], case["lac"], case["length"], batch, BATCH_FORMAT_VERSION)
    assert encoded.hex() == case["encoded_hex"]
    assert entry_encoder(d, *args, BATCH_FORMAT_VERSION)(case["entry_id"], case["lac"], case["length"], batch) == encoded
    assert encoded[0] >> 4 == 0xB  # marker | version 3
    e = decode_entry(d, encoded, *args, case["entry_id"])
    assert e.format_version == BATCH_FORMAT_VERSION
    got = mb.decode_batch(e.payload)
    assert got.count == len(msgs) and got.payloads() == payloads
    for i, m in enumerate(msgs):
        assert got.payload(i) == payloads[i]
        assert int(got.append_ms[i]) == m["append_time_ms"]
        assert got.key(i) == (None if m.get("key_hex") is None else bytes.fromhex(m["key_hex"]))
        assert got.event_time_ms(i) == m.get("event_time_ms")
        assert got.headers(i) == [(k, bytes.fromhex(v)) for k, v in m.get("headers", [])]


def test_a_copy_keeps_the_format_and_version_2_reads_as_before() -> None:
    d = Digest.for_ledger("crc32c")
    batch = mb.encode_batch([b"a", b"b"], [5, 5])
    v3 = encode_entry(d, 0, 9, 4, 3, 100, batch, BATCH_FORMAT_VERSION)
    assert encode_copy(d, 0, 9, decode_entry(d, v3, 0, 9, 4)) == v3  # recovery, repair, re-replication
    v2 = encode_entry(d, 0, 9, 4, 3, 100, b"plain")
    assert v2[0] == 0xA2 and entry_encoder(d, 0, 9)(4, 3, 100, b"plain") == v2
    e = decode_entry(d, v2, 0, 9, 4)
    assert (e.format_version, e.payload) == (FORMAT_VERSION, b"plain")
    assert encode_copy(d, 0, 9, e) == v2
    mac = Digest.for_ledger("mac", b"pw")
    kept = decode_entry(Digest.for_ledger("mac", b"pw"), encode_entry(mac, 0, 9, 4, 3, 100, batch, 3), 0, 9, 4)
    assert encode_copy(mac, 0, 9, kept)[0] == 0xB0
    with pytest.raises(EntryFormatError, match="version 4"):
        encode_entry(d, 0, 9, 4, 3, 100, batch, 4)


def test_the_ledger_names_its_entry_format() -> None:
    assert entry_format_of_ledger({}) == FORMAT_VERSION
    assert entry_format_of_ledger({ENTRY_FORMAT_KEY: b"3"}) == BATCH_FORMAT_VERSION
    with pytest.raises(EntryFormatError, match="not one this client writes"):
        entry_format_of_ledger({ENTRY_FORMAT_KEY: b"7"})
    with pytest.raises(EntryFormatError, match="not a format version"):
        entry_format_of_ledger({ENTRY_FORMAT_KEY: b"three"})


@pytest.mark.parametrize("make, bound", [
    (lambda: mb.encode_batch([], []), "MESSAGES_PER_ENTRY_MAX"),
    (lambda: mb.encode_batch([b""] * (mb.MESSAGES_PER_ENTRY_MAX + 1), [0] * (mb.MESSAGES_PER_ENTRY_MAX + 1)),
     "MESSAGES_PER_ENTRY_MAX"),
    (lambda: mb.encode_batch([b"x"], [0], keys=[b"k" * (mb.KEY_BYTES_MAX + 1)]), "KEY_BYTES_MAX"),
    (lambda: mb.encode_batch([b"x"], [0], headers=[[("h", b"")] * (mb.HEADERS_PER_MESSAGE_MAX + 1)]),
     "HEADERS_PER_MESSAGE_MAX"),
    (lambda: mb.encode_batch([b"x"], [0], headers=[[("h" * (mb.HEADER_KEY_BYTES_MAX + 1), b"")]]),
     "HEADER_KEY_BYTES_MAX"),
    (lambda: mb.encode_batch([b"x"], [0], headers=[[("h", b"v" * (mb.HEADER_VALUE_BYTES_MAX + 1))]]),
     "HEADER_VALUE_BYTES_MAX"),
    (lambda: mb.encode_batch([b"x"], [0], headers=[[("h", "not bytes")]]), r"\(str, bytes\) pair"),
])
def test_bounds_are_named(make: Any, bound: str) -> None:
    with pytest.raises(mb.MessageBoundError, match=bound):
        make()


def test_columns_must_match_the_messages() -> None:
    with pytest.raises(EntryFormatError, match="2 append times for 1 messages"):
        mb.encode_batch([b"x"], [0, 1])


def test_every_malformed_batch_is_refused() -> None:
    good = mb.encode_batch([b"ab", b"c"], [1, 2], keys=[b"k", None], headers=[[("h", b"v")], []])
    assert mb.decode_batch(good).payloads() == [b"ab", b"c"]
    for cut in range(len(good)):  # every truncation
        with pytest.raises(EntryFormatError):
            mb.decode_batch(good[:cut])
    with pytest.raises(EntryFormatError, match="past its last message"):
        mb.decode_batch(good + b"!")
    with pytest.raises(EntryFormatError, match=r"layout 0x85 has bits 0x80 unknown to this release \(it knows 0x01 keys"):
        mb.decode_batch(good[:4] + b"\x85" + good[5:])
    for bit, needs in ((mb.EVENT_TIME_OFFSETS, "'event times'"), (mb.SHARED_HEADER_KEYS, "'headers'")):
        with pytest.raises(EntryFormatError, match=f"without {needs}"):  # a refinement without what it refines
            mb.decode_batch(good[:4] + bytes([mb.KEYS | bit]) + good[5:])
    with pytest.raises(EntryFormatError, match="'shared headers' without 'shared header keys'"):
        mb.decode_batch(good[:4] + bytes([mb.KEYS | mb.HEADERS | mb.SHARED_HEADERS]) + good[5:])
    with pytest.raises(EntryFormatError, match="reserved bytes"):
        mb.decode_batch(good[:6] + b"\x01" + good[7:])
    with pytest.raises(EntryFormatError, match="count 0"):
        mb.decode_batch(b"\0\0\0\0" + good[4:])
    with pytest.raises(EntryFormatError, match="key length"):
        key_at = mb.HEAD_BYTES + 2 * 12  # after the lengths and the append times
        mb.decode_batch(good[:key_at] + (-5).to_bytes(4, "big", signed=True) + good[key_at + 4:])


def test_seeded_round_trips() -> None:
    seed = 20261127
    rng = random.Random(seed)
    for _ in range(200):
        n = rng.randint(1, 50)
        payloads = [rng.randbytes(rng.randint(0, 40)) for _ in range(n)]
        times = [rng.randint(0, 2**62) for _ in range(n)]
        keys = [rng.choice([None, rng.randbytes(rng.randint(0, 8))]) for _ in range(n)] if rng.random() < 0.5 else None
        events = [rng.choice([mb.NO_TIME, rng.randint(-(2**40), 2**40)]) for _ in range(n)] if rng.random() < 0.5 \
            else None
        headers = [[(rng.choice(["a", "b", "ü"]), rng.randbytes(rng.randint(0, 4))) for _ in range(rng.randint(0, 3))]
                   for _ in range(n)] if rng.random() < 0.5 else None
        got = mb.decode_batch(mb.encode_batch(payloads, times, keys=keys, event_ms=events, headers=headers))
        assert got.payloads() == payloads and got.append_ms.tolist() == times, f"seed {seed}"
        for i in range(n):
            assert got.key(i) == (None if keys is None else keys[i]), f"seed {seed}"
            assert got.event_time_ms(i) == (None if events is None or events[i] == mb.NO_TIME else events[i])
            assert got.headers(i) == ([] if headers is None else headers[i]), f"seed {seed}"


def test_short_layout_offsets_out_of_range_are_refused() -> None:
    short = mb.encode_columns([b"a", b"b"], 5, event_ms=[mb.TIME_MS_MAX - 1, mb.TIME_MS_MAX])
    assert mb.decode_batch(short).event_ms.tolist() == [mb.TIME_MS_MAX - 1, mb.TIME_MS_MAX]
    at = mb.HEAD_BYTES + 4 * 2 + 8 + 8 + 4  # the second message's offset, after the base
    with pytest.raises(EntryFormatError, match="offsets run outside the i64 range"):
        mb.decode_batch(short[:at] + (5).to_bytes(4, "big") + short[at + 4:])


def test_positions_order_by_index_and_old_json_parses() -> None:
    lid = LedgerId(0, 5)
    a, b, c, d = Position(1, 2, lid), Position(1, 2, lid, 1), Position(1, 3, lid), Position(2, 0, LedgerId(0, 6))
    assert a < b < c < d and sorted([d, c, b, a]) == [a, b, c, d]
    assert Position.from_json(b.to_json()) == b and b.to_json()["index"] == 1
    old = {"seq": 1, "ledger": lid.qualified_name, "entry": 2}  # written before batches: no index
    assert Position.from_json(old) == a and Position.from_json(json.dumps(old)).index == 0
    with pytest.raises(ValueError, match="index"):
        Position(1, 2, lid, -1)
    with pytest.raises(ValueError, match="not a log position"):
        Position.from_json({"seq": 1, "ledger": lid.qualified_name, "entry": 2, "index": "x"})


def test_the_log_record_names_its_message_format_and_old_records_read() -> None:
    rec = LogRecord("l").with_ledger(LedgerId(0, 1))
    assert rec.message_format == "single"
    old = to_json_dict(rec)
    del old["messageFormat"]  # a record of a release before batches
    assert from_json_dict(old).message_format == "single"
    batched = rec.with_message_format("batched")
    assert decode(encode(batched), "l").message_format == "batched"
    assert batched.with_message_format("single").message_format == "batched"  # never back: old entries are batches
    future = from_json_dict({**old, "messageFormat": "columnar-v9"})
    assert decode(encode(future), "l").message_format == "columnar-v9"  # kept as stored, refused by readers
