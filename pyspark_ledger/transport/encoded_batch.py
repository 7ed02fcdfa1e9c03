"""An add batch encoded once for every bookie of a write set, in the encoding of each stream's wire
version (transport.add_streams sends it; docs/add-transport.md describes both encodings)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from bookie.proto import bookie_pb2 as pb
from bookie.proto.add_framing import frame
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
                 "_frames", "_requests")

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
        self._requests: dict[int, bytes] = {}

    def frame_for(self, wire_version: int) -> bytes:
        """This batch as one `batches` element, in the encoding of `wire_version`."""
        run = wire_version >= RUN_ADDS_VERSION
        found = self._frames.get(run)
        if found is None:
            batch = pb.AddBatch(request_id=self.request_id, ledger=ledger_ref(self._ledger),
                                master_key=self._master_key, recovery=self._recovery,
                                entry_ids=self._ids, lacs=self._lacs)
            datas = self._datas
            if run:
                batch.run_lengths.extend(map(len, datas))
                batch.run_body = b"".join(datas)
            else:
                batch.entries.extend(datas)
            body = batch.SerializeToString()
            found = self._frames[run] = _BATCHES_TAG + encode_varint(len(body)) + body
        return found

    def request(self, wire_version: int) -> bytes:
        """This batch alone as one framed request (add transport), built once for all bookies."""
        run = wire_version >= RUN_ADDS_VERSION
        found = self._requests.get(run)
        if found is None:
            found = self._requests[run] = frame([self.frame_for(wire_version)])
        return found


_BATCHES_TAG = bytes([(pb.AddRequest.DESCRIPTOR.fields_by_name["batches"].number << 3) | 2])
