"""The zero-copy parse of run answers agrees with protobuf's own parse, field for field."""

from __future__ import annotations

import random

import pytest
from google.protobuf.message import DecodeError

from bookie.proto import bookie_pb2 as pb
from bookie.proto.wire import encode_varint
from pyspark_ledger.transport.run_response import MalformedResponse, parse_run_response


def _same(raw: bytes) -> None:
    want = pb.ReadResponse.FromString(raw)
    got = parse_run_response(raw)
    assert (got.status, got.message, got.lac) == (want.status, want.message, want.lac)
    assert list(got.entry_ids) == list(want.entry_ids) and list(got.entry_status) == list(want.entry_status)
    assert [(r.first_entry_id, list(r.lengths), bytes(r.data)) for r in got.runs] == \
           [(r.first_entry_id, list(r.lengths), r.data) for r in want.runs]


def test_messages_of_every_shape_parse_as_protobuf_parses_them() -> None:
    rng = random.Random(7)
    print("seed 7")
    _same(b"")  # all defaults
    for _ in range(200):
        resp = pb.ReadResponse(status=rng.choice([0, 1, 2, 7, 11]), lac=rng.randint(-1, 2**40),
                               message=rng.choice(["", "bad range", "ü" * 3]))
        for _ in range(rng.randint(0, 4)):
            lengths = [rng.randint(0, 300) for _ in range(rng.randint(1, 20))]
            resp.runs.add(first_entry_id=rng.randint(0, 2**50), lengths=lengths,
                          data=bytes(rng.getrandbits(8) for _ in range(sum(lengths))))
        missing = sorted(rng.sample(range(1000), rng.randint(0, 5)))
        resp.entry_ids.extend(missing)
        resp.entry_status.extend(rng.choice([2, 7]) for _ in missing)
        _same(resp.SerializeToString())


def test_the_data_is_a_view_of_the_received_bytes() -> None:
    raw = pb.ReadResponse(runs=[pb.EntryRun(first_entry_id=5, lengths=[3, 4], data=b"abcdefg")]).SerializeToString()
    (run,) = parse_run_response(raw).runs
    assert run.data.obj is raw and bytes(run.data) == b"abcdefg"


def test_unknown_fields_unpacked_lengths_and_repeated_scalars_follow_protobuf() -> None:
    run_body = (b"\x08" + encode_varint(9)  # first_entry_id = 9
                + b"\x10\x02" + b"\x10\x03"  # lengths unpacked: 2, 3
                + b"\x1a\x05hello"  # data
                + b"\xa0\x06\x2a")  # unknown varint field 100
    raw = (b"\x18" + encode_varint(4)  # lac = 4
           + b"\x3a" + encode_varint(len(run_body)) + run_body  # runs
           + b"\xaa\x06\x03xyz"  # unknown length-delimited field 101
           + b"\x18" + encode_varint(6))  # lac again: the last one wins
    _same(raw)
    got = parse_run_response(raw)
    assert got.lac == 6 and list(got.runs[0].lengths) == [2, 3] and bytes(got.runs[0].data) == b"hello"


@pytest.mark.parametrize("raw", [
    b"\x3a\x05abc",  # a run longer than the message
    b"\x18\x80",  # a varint cut off
    b"\x1b",  # wire type 3 (groups): not in this schema
    b"\x3a\x03\x1a\x05a",  # a run whose data runs past the run
], ids=["run past the end", "cut varint", "group", "data past its run"])
def test_malformed_answers_are_refused(raw: bytes) -> None:
    with pytest.raises((MalformedResponse, DecodeError)):
        parse_run_response(raw)
