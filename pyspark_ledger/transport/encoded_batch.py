"""An add batch encoded once for every bookie of a write set, in the encoding of each stream's wire
version (transport.add_streams sends it; docs/add-transport.md describes both encodings)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from bookie.proto import bookie_pb2 as pb
from bookie.proto.add_framing import frame_header
from bookie.proto.versions import RUN_ADDS_VERSION
from bookie.proto.wire import encode_varint

LedgerKey = tuple[int, int]

# Request ids are unique per process, not per stream, so one encoded batch can go to every bookie
# of a write set: the same id is unique on each of their streams.
_request_ids = itertools.count(1)


def ledger_ref(ledger: LedgerKey) -> pb.LedgerRef:
    return pb.LedgerRef(scope_id=ledger[0], ledger_id=ledger[1])


class EncodedAddBatch:
    """An AddBatch serialized once per wire version, already framed as one `batches` element of an
    AddRequest: requests are the concatenation of such frames (protobuf's encoding of a repeated
    field), so coalescing batches costs a join and sending one to three bookies costs one
    serialization. A bookie speaking version 2 (RUN_ADDS_VERSION) gets the batch as a run: one
    lengths array and one body, which it cuts into views instead of decoding entry by entry; one
    speaking version 1 gets the per-entry encoding. Each is built when a stream first asks for it."""

    __slots__ = ("request_id", "payload_bytes", "_ledger", "_master_key", "_recovery", "_ids", "_lacs", "_datas",
                 "_frames", "_requests", "_parts")

    def __init__(self, ledger: LedgerKey, master_key: bytes, entries: Sequence[tuple[int, int, bytes]],
                 *, recovery: bool = False):
        self._init(ledger, master_key, [e[0] for e in entries], [e[1] for e in entries], [e[2] for e in entries],
                   recovery)

    @classmethod
    def of_columns(cls, ledger: LedgerKey, master_key: bytes, entry_ids: Sequence[int], lacs: Sequence[int],
                   datas: Sequence[bytes], *, recovery: bool = False) -> EncodedAddBatch:
        """The same batch from its columns (entry ids, LACs, encoded entries): the writer's runs
        come as columns already, so no tuple per entry is built and taken apart again."""
        batch = cls.__new__(cls)
        batch._init(ledger, master_key, entry_ids, lacs, datas, recovery)
        return batch

    def _init(self, ledger: LedgerKey, master_key: bytes, entry_ids: Sequence[int], lacs: Sequence[int],
              datas: Sequence[bytes], recovery: bool) -> None:
        if not len(entry_ids) == len(lacs) == len(datas):
            raise ValueError(f"add batch columns differ in length: {len(entry_ids)} ids, {len(lacs)} LACs, "
                             f"{len(datas)} entries")
        self.request_id = next(_request_ids)
        self._ledger, self._master_key, self._recovery = ledger, master_key, recovery
        self._ids, self._lacs, self._datas = entry_ids, lacs, datas
        self.payload_bytes = sum(map(len, datas))
        self._frames: dict[int, bytes] = {}
        self._requests: dict[int, list[bytes]] = {}
        self._parts: dict[int, list[bytes]] = {}

    def frame_for(self, wire_version: int) -> bytes:
        """This batch as one `batches` element, in the encoding of `wire_version`."""
        run = wire_version >= RUN_ADDS_VERSION
        found = self._frames.get(run)
        if found is None:
            parts = self.frame_parts(wire_version)
            found = self._frames[run] = parts[0] if len(parts) == 1 else b"".join(parts)
        return found

    def frame_parts(self, wire_version: int) -> list[bytes]:
        """frame_for's bytes as parts to send one after the other: a run of large entries is its
        head (everything up to the run body's length, built by hand as protobuf would write it,
        run_body being the last field) and then the entries themselves, so the payload is not
        copied into a body, into protobuf's message and out of it again (five copies of every
        byte: 2026-11-28, a quarter of the client's CPU per MB adding 2 MiB entries)."""
        run = wire_version >= RUN_ADDS_VERSION
        found = self._parts.get(run)
        if found is None:
            batch = pb.AddBatch(request_id=self.request_id, ledger=ledger_ref(self._ledger),
                                master_key=self._master_key, recovery=self._recovery,
                                entry_ids=self._ids, lacs=self._lacs)
            datas = self._datas
            if not run:
                batch.entries.extend(datas)
                body = batch.SerializeToString()
                found = [_BATCHES_TAG + encode_varint(len(body)) + body]
            else:
                batch.run_lengths.extend(map(len, datas))
                head = batch.SerializeToString()
                if self.payload_bytes:  # proto3 leaves an empty run_body out
                    head += _RUN_BODY_TAG + encode_varint(self.payload_bytes)
                found = [_BATCHES_TAG + encode_varint(len(head) + self.payload_bytes) + head]
                if self.payload_bytes < len(datas) * SEPARATE_ENTRY_BYTES_MIN:
                    found.append(b"".join(datas))  # small entries: one copy is cheaper than a buffer each
                else:
                    found += datas
            self._parts[run] = found
        return found

    def request_parts(self, wire_version: int) -> list[bytes]:
        """This batch alone as one framed request (add transport), as parts (frame_parts after a
        frame header), built once for all bookies: sent with one scatter-gather call, never
        joined (transport.add_streams)."""
        run = wire_version >= RUN_ADDS_VERSION
        found = self._requests.get(run)
        if found is None:
            parts = self.frame_parts(wire_version)
            found = self._requests[run] = [frame_header(sum(map(len, parts))), *parts]
        return found


_BATCHES_TAG = bytes([(pb.AddRequest.DESCRIPTOR.fields_by_name["batches"].number << 3) | 2])
# AddBatch.run_body, length-delimited: the last field of a run batch (fields are written in number order).
_RUN_BODY_TAG = bytes([(pb.AddBatch.DESCRIPTOR.fields_by_name["run_body"].number << 3) | 2])
# Entries at least this large (on average) are sent as buffers of their own; smaller ones are
# joined into one body (a buffer per entry costs more than copying it).
SEPARATE_ENTRY_BYTES_MIN = 16 * 1024
