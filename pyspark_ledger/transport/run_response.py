"""A run-encoded ReadResponse (bookie.proto, ReadRequest.entry_runs) parsed without copying its data.

A range read for Spark returns up to tens of MiB per response, almost all of it in the `data` of
its EntryRuns. Protobuf's parser copies those bytes into its arena and again into a Python bytes
object when the field is read: two copies of everything read, about an eighth of a Spark reader's
CPU. Here a small scanner walks the message's fields and keeps each run's `data` as a memoryview
of the bytes gRPC received; every other field is handed to protobuf itself (fields may be split
and re-joined: protobuf merges repeated and last-wins scalar fields), so packed or unpacked
repeated fields, defaults and unknown fields behave exactly as with ReadResponse.FromString.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bookie.proto import bookie_pb2 as pb
from pyspark_ledger.errors import PySparkLedgerError

_RUNS_FIELD = pb.ReadResponse.DESCRIPTOR.fields_by_name["runs"].number
_DATA_FIELD = pb.EntryRun.DESCRIPTOR.fields_by_name["data"].number
_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5


class MalformedResponse(PySparkLedgerError, ValueError):
    """The bytes are not a well-formed protobuf message."""


@dataclass(frozen=True, slots=True)
class Run:
    first_entry_id: int
    lengths: Sequence[int]
    data: memoryview  # a view of the received response: no copy


@dataclass(frozen=True, slots=True)
class RunResponse:
    status: int
    message: str
    lac: int
    entry_ids: Sequence[int]
    entry_status: Sequence[int]
    runs: list[Run]


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise MalformedResponse("a varint runs past the end of the message")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise MalformedResponse("a varint longer than 10 bytes")


def _fields(buf: memoryview) -> list[tuple[int, int, int, int, int]]:
    """(field number, wire type, start of the field's tag, start of its value, end) of each field."""
    out = []
    pos, end = 0, len(buf)
    while pos < end:
        start = pos
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        value_at = pos
        if wire == _VARINT:
            _, pos = _varint(buf, pos)
        elif wire == _FIXED64:
            pos += 8
        elif wire == _FIXED32:
            pos += 4
        elif wire == _LENGTH_DELIMITED:
            size, value_at = _varint(buf, pos)
            pos = value_at + size
        else:
            raise MalformedResponse(f"unsupported wire type {wire} for field {number}")
        if pos > end or number == 0:
            raise MalformedResponse(f"field {number} runs past the end of the message")
        out.append((number, wire, start, value_at, pos))
    return out


def _run(buf: memoryview) -> Run:
    rest: list[memoryview] = []
    data = memoryview(b"")
    for number, wire, start, value_at, end in _fields(buf):
        if number == _DATA_FIELD and wire == _LENGTH_DELIMITED:
            data = buf[value_at:end]  # last one wins, as in protobuf
        else:
            rest.append(buf[start:end])
    meta = pb.EntryRun.FromString(b"".join(rest))
    return Run(meta.first_entry_id, meta.lengths, data)


def parse_run_response(raw: bytes) -> RunResponse:
    """A ReadResponse from its serialized bytes, runs' data zero-copy (see the module doc)."""
    buf = memoryview(raw)
    rest: list[memoryview] = []
    runs: list[Run] = []
    for number, wire, start, value_at, end in _fields(buf):
        if number == _RUNS_FIELD and wire == _LENGTH_DELIMITED:
            runs.append(_run(buf[value_at:end]))
        else:
            rest.append(buf[start:end])
    head = pb.ReadResponse.FromString(b"".join(rest))
    return RunResponse(head.status, head.message, head.lac, head.entry_ids, head.entry_status, runs)
