"""The run answer of a range read (ReadRequest.entry_runs) serialized by hand, its data copied once.

A run answer is mostly the runs' data: tens of MiB of stored entries per response. Through a
protobuf message those bytes were copied into the message's field and again by its
serialization, each copy as costly as the whole rest of a bookie's read. Here the small fields
(status, lac, the ids and statuses of the entries that are not OK, each run's first id and
lengths) are serialized by protobuf itself, and each run's `data` field is framed by hand
around the run's chunks (range_read.EntryRun), all joined once into the response's bytes.
Protobuf allows a message's fields in any order and merges a message given in pieces, so any
protobuf parser reads the result as the ReadResponse it stands for (the client parses it
without copying the data: pyspark_ledger/transport/run_response.py).

grpc's serializer for Read passes these bytes through (register_bookie_service); every other
answer is still a message, serialized by protobuf.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import grpc

from bookie.proto import bookie_pb2 as pb
from bookie.proto import bookie_pb2_grpc as pb_grpc
from bookie.proto.wire import encode_varint
from bookie.status import Status
from bookie.storage.errors import ensure
from bookie.storage.range_read import Chunk, EntryRun

_LENGTH_DELIMITED = 2
_RUNS_TAG = bytes([pb.ReadResponse.DESCRIPTOR.fields_by_name["runs"].number << 3 | _LENGTH_DELIMITED])
_DATA_TAG = bytes([pb.EntryRun.DESCRIPTOR.fields_by_name["data"].number << 3 | _LENGTH_DELIMITED])
_SERVICE = pb.DESCRIPTOR.services_by_name["Bookie"].full_name


def run_answer_parts(status: Status, lac: int, runs: Sequence[EntryRun],
                     others: Sequence[tuple[int, Status]]) -> list[Chunk]:
    """The serialized ReadResponse of a run answer, in pieces whose concatenation is it: status
    and lac, each run (its first id, lengths and data: the run's chunks, straight from the pread
    buffers), and the ids and statuses of the others. A read connection sends the pieces as they
    are (bookie/read_connection.py); gRPC's Read joins them into one buffer."""
    head = pb.ReadResponse(status=int(status), lac=lac)
    if others:
        head.entry_ids.extend([eid for eid, _ in others])
        head.entry_status.extend([int(st) for _, st in others])
    parts: list[Chunk] = [head.SerializeToString()]
    for run in runs:
        size = run.size_bytes
        ensure(size == sum(run.lengths), f"run at entry {run.first_entry_id}: {size} bytes for lengths adding "
                                          f"up to {sum(run.lengths)}")
        meta = pb.EntryRun(first_entry_id=run.first_entry_id, lengths=run.lengths).SerializeToString()
        data_head = _DATA_TAG + encode_varint(size)
        parts += [_RUNS_TAG, encode_varint(len(meta) + len(data_head) + size), meta, data_head, *run.chunks]
    return parts


def _read_serializer(response: pb.ReadResponse | bytes) -> bytes:
    """Read's answers: a run answer is serialized already (bytes), any other is a message."""
    if isinstance(response, bytes):
        return response
    return pb.ReadResponse.SerializeToString(response)


class _HandlerCapture:
    """Stands in for a server to take the generated method handlers (bookie_pb2_grpc)."""

    def __init__(self) -> None:
        self.handlers: dict[str, Any] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass  # the same handlers come again by name, below

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        self.handlers = dict(handlers)


def register_bookie_service(service: Any, server: grpc.Server,
                            serializer: Callable[[Any], bytes] = _read_serializer) -> None:
    """pb_grpc.add_BookieServicer_to_server, with Read's answers passed through `serializer`
    (run answers are bytes already: the joined run_answer_parts)."""
    capture = _HandlerCapture()
    pb_grpc.add_BookieServicer_to_server(service, capture)
    handlers = capture.handlers
    if "Read" not in handlers:
        raise ImportError(f"the generated {_SERVICE} handlers have no Read (bookie_pb2_grpc changed)")
    handlers["Read"] = handlers["Read"]._replace(response_serializer=serializer)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(_SERVICE, handlers),))
    server.add_registered_method_handlers(_SERVICE, handlers)
