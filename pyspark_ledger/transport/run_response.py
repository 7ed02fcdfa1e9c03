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
from bookie.proto.wire import LENGTH_DELIMITED, Field, WireFormatError, message_fields
from pyspark_ledger.errors import PySparkLedgerError

_RUNS_FIELD = pb.ReadResponse.DESCRIPTOR.fields_by_name["runs"].number
_DATA_FIELD = pb.EntryRun.DESCRIPTOR.fields_by_name["data"].number


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


def _fields(buf: memoryview) -> list[Field]:
    try:
        return message_fields(buf)
    except WireFormatError as exc:
        raise MalformedResponse(str(exc)) from exc


def _run(buf: memoryview) -> Run:
    rest: list[memoryview] = []
    data = memoryview(b"")
    for number, wire, start, value_at, end in _fields(buf):
        if number == _DATA_FIELD and wire == LENGTH_DELIMITED:
            data = buf[value_at:end]  # last one wins, as in protobuf
        else:
            rest.append(buf[start:end])
    meta = pb.EntryRun.FromString(b"".join(rest))
    return Run(meta.first_entry_id, meta.lengths, data)


def parse_run_response(raw: bytes | memoryview) -> RunResponse:
    """A ReadResponse from its serialized bytes (gRPC's, or a read connection's buffer), runs'
    data zero-copy (see the module doc)."""
    buf = memoryview(raw)
    rest: list[memoryview] = []
    runs: list[Run] = []
    for number, wire, start, value_at, end in _fields(buf):
        if number == _RUNS_FIELD and wire == LENGTH_DELIMITED:
            runs.append(_run(buf[value_at:end]))
        else:
            rest.append(buf[start:end])
    head = pb.ReadResponse.FromString(b"".join(rest))
    return RunResponse(head.status, head.message, head.lac, head.entry_ids, head.entry_status, runs)
