"""A run sent as parts (transport.encoded_batch.frame_parts, add_framing.sendall_parts): the
bytes on the wire are exactly protobuf's encoding of the batch, however the entries are split
into buffers and however the socket cuts the sends."""

from __future__ import annotations

import os
import socket
import threading

import pytest

from bookie.proto import bookie_pb2 as pb
from bookie.proto.add_framing import FRAME_HEADER, SEND_BUFFERS_MAX, sendall_parts
from pyspark_ledger.transport.encoded_batch import SEPARATE_ENTRY_BYTES_MIN, EncodedAddBatch


@pytest.mark.parametrize("sizes", [[], [0, 0], [1, 2, 3], [SEPARATE_ENTRY_BYTES_MIN] * 3, [300_000], [0, 70_000, 5]])
@pytest.mark.parametrize("version", [1, 2])
def test_the_parts_are_protobufs_encoding_of_the_batch(sizes: list[int], version: int) -> None:
    datas = [os.urandom(n) for n in sizes]
    ids, lacs = list(range(10, 10 + len(datas))), [9] * len(datas)
    batch = EncodedAddBatch.of_columns((4, 5), b"key", ids, lacs, datas, recovery=True)
    want = pb.AddBatch(request_id=batch.request_id, ledger=pb.LedgerRef(scope_id=4, ledger_id=5), master_key=b"key",
                       recovery=True, entry_ids=ids, lacs=lacs)
    if version >= 2:
        want.run_lengths.extend(sizes)
        want.run_body = b"".join(datas)
    else:
        want.entries.extend(datas)
    body = pb.AddRequest(batches=[want]).SerializeToString()

    assert b"".join(batch.frame_parts(version)) == body == batch.frame_for(version)
    request = b"".join(batch.request_parts(version))
    assert request == FRAME_HEADER.pack(len(body)) + body
    if version >= 2 and sum(sizes) >= len(sizes) * SEPARATE_ENTRY_BYTES_MIN > 0:
        assert batch.frame_parts(version)[1:] == datas  # sent from the entries' own buffers


def test_sendall_parts_delivers_every_byte_in_order_across_partial_sends() -> None:
    parts = [os.urandom(n) for n in [0, 1, 70_000, 0, 3, *([5_000] * (SEND_BUFFERS_MAX + 100)), 200_000]]
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)  # sends are cut into many pieces
    received = bytearray()

    def receive() -> None:
        while chunk := theirs.recv(65536):
            received.extend(chunk)

    reader = threading.Thread(target=receive)
    reader.start()
    sendall_parts(ours, parts)
    sendall_parts(ours, [b"small", b" frame"])  # joined and sent plainly
    ours.close()
    reader.join(timeout=120)
    assert not reader.is_alive()
    assert bytes(received) == b"".join(parts) + b"small frame"
    theirs.close()
