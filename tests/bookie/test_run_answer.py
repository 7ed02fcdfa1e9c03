"""Run answers serialized by hand (bookie/run_answer.py): byte for byte what protobuf's parser
reads as the ReadResponse built the usual way, whatever the chunks; the client's zero-copy
parser reads the same; a run whose chunks do not add up to its lengths is refused."""

from __future__ import annotations

import pytest

from bookie.proto import bookie_pb2 as pb
from bookie.proto.wire import WireFormatError, encode_varint, message_fields
from bookie.run_answer import _read_serializer, run_answer_parts
from bookie.status import Status
from bookie.storage.errors import InvariantError
from bookie.storage.range_read import EntryRun
from pyspark_ledger.transport.run_response import parse_run_response


def entry(i: int, size: int) -> bytes:
    return bytes((i * 7 + k) % 251 for k in range(size))


def _joined(status: Status, lac: int, runs: list[EntryRun], others: list[tuple[int, Status]]) -> bytes:
    """The answer as gRPC's Read sends it: the parts end to end."""
    return b"".join(run_answer_parts(status, lac, runs, others))


def test_a_hand_serialized_answer_is_the_message_protobuf_builds() -> None:
    sizes = [3, 200, 0, 5000, 131]
    first = [entry(i, n) for i, n in enumerate(sizes)]
    blob = b"".join(first)
    # The same bytes as one chunk, as views of a larger buffer, and as pieces of other sizes.
    cut = memoryview(b"xx" + blob + b"yy")[2:-2]
    shapes: list[list[bytes | memoryview]] = [[blob], [cut[:100], cut[100:]], first]
    second = [entry(9, 70_000)]  # a data field whose length takes three varint bytes
    for chunks in shapes:
        runs = [EntryRun(10, sizes, chunks), EntryRun(20, [70_000], list(second))]
        others = [(15, Status.NO_SUCH_ENTRY), (16, Status.UNKNOWN_ENTRY_STATE)]
        got = _joined(Status.OK, 19, runs, others)
        want = pb.ReadResponse(status=int(Status.OK), lac=19, entry_ids=[15, 16],
                               entry_status=[int(Status.NO_SUCH_ENTRY), int(Status.UNKNOWN_ENTRY_STATE)])
        want.runs.add(first_entry_id=10, lengths=sizes, data=blob)
        want.runs.add(first_entry_id=20, lengths=[70_000], data=second[0])
        assert pb.ReadResponse.FromString(got) == want
        parsed = parse_run_response(got)
        assert [(r.first_entry_id, list(r.lengths), bytes(r.data)) for r in parsed.runs] == \
            [(10, sizes, blob), (20, [70_000], second[0])]
        assert (parsed.status, parsed.lac, list(parsed.entry_ids)) == (Status.OK, 19, [15, 16])


def test_an_answer_without_runs_is_status_lac_and_others_only() -> None:
    got = _joined(Status.OK, -1, [], [(0, Status.NO_SUCH_ENTRY)])
    assert pb.ReadResponse.FromString(got) == pb.ReadResponse(status=int(Status.OK), lac=-1, entry_ids=[0],
                                                              entry_status=[int(Status.NO_SUCH_ENTRY)])


def test_a_run_whose_chunks_differ_from_its_lengths_is_refused() -> None:
    with pytest.raises(InvariantError, match="run at entry 4: 5 bytes for lengths adding up to 6"):
        _joined(Status.OK, 4, [EntryRun(4, [3, 3], [b"abcde"])], [])


@pytest.mark.parametrize("value, encoded", [(0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"),
                                            (300, b"\xac\x02"), (2**63 - 1, b"\xff" * 8 + b"\x7f")])
def test_varints_are_protobufs(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded
    with pytest.raises(ValueError, match="negative"):
        encode_varint(-1)


def test_reads_serializer_passes_bytes_and_serializes_messages() -> None:
    message = pb.ReadResponse(status=int(Status.NO_SUCH_LEDGER), lac=-1)
    assert _read_serializer(message) == message.SerializeToString()
    assert _read_serializer(b"\x08\x01") == b"\x08\x01"


def test_message_fields_walks_what_protobuf_wrote_and_refuses_the_rest() -> None:
    raw = pb.ReadResponse(status=2, lac=300, entry_ids=[1, 2]).SerializeToString()
    fields = message_fields(memoryview(raw))
    assert [(number, wire) for number, wire, *_ in fields] == [(1, 0), (3, 0), (4, 2)]
    assert b"".join(raw[start:end] for _, _, start, _, end in fields) == raw  # every byte, in order
    _, _, _, value_at, end = fields[2]
    assert raw[value_at:end] == b"\x01\x02"  # a packed field's value, after its length
    with pytest.raises(WireFormatError, match="more than 2 fields"):
        message_fields(memoryview(raw), fields_max=2)
    for bad, why in ((b"\x0b", "wire type 3"), (b"\x0a\x05ab", "runs past the end"),
                     (b"\x08" + b"\xff" * 11, "longer than 10 bytes"), (b"\x02\x00", "field 0")):
        with pytest.raises(WireFormatError, match=why):
            message_fields(memoryview(bad))
