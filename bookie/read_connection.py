"""Read connections: run reads (ReadRequest.entry_runs) over the add listener's plain TCP.

A Spark read moves tens of MiB per range read, and through gRPC Python each answer is copied
about once more in the bookie (the joined answer into gRPC's message) and about three times in
the reader (HTTP/2 frames into slices, slices into one bytes object), besides gRPC's own threads.
On a read connection the bookie sends the answer's parts (bookie/run_answer.py's run_answer_parts)
with scatter-gather sends straight from the pread buffers, and the client receives each answer
into one buffer and parses it as views (pyspark_ledger/transport/read_connections.py): each byte
is copied once on either side, by the kernel.

A client opens one with the read hello (add_framing.READ_MAGIC plus a wire version, answered like
an add connection's); then each frame it sends is a serialized ReadRequest, and the bookie answers
each with one frame, a serialized ReadResponse, in order. Only run reads are served (anything else
is answered INVALID_REQUEST), under the gRPC Read's authorization (BookieService.socket_read). The
add listener's bounds apply: connections per peer and in all, the idle timeout, and a send that
stalls for add_framing.SEND_TIMEOUT_S closes the connection.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable

from google.protobuf.message import DecodeError

from bookie.proto import bookie_pb2 as pb
from bookie.proto.add_framing import FrameReader, FramingError, frame_header, sendall_parts
from bookie.storage.range_read import Chunk

# (request, the connection's verified TLS client identity or None) -> the answer's parts.
ReadAnswer = Callable[[pb.ReadRequest, str | None], list[Chunk]]


def send_frame(conn: socket.socket, parts: list[Chunk]) -> None:
    """One frame of the parts' concatenation: scatter-gather sends on a plain socket (no join);
    under TLS, which copies every byte to encrypt it anyway, one joined send."""
    header = frame_header(sum(map(len, parts)))
    if isinstance(conn, ssl.SSLSocket):
        conn.sendall(b"".join([header, *parts]))
    else:
        sendall_parts(conn, [header, *parts])


def serve_reads(conn: socket.socket, answer: ReadAnswer, identity: str | None) -> None:
    """Answer the connection's read frames until the client closes it (FramingError for a frame
    that is not a ReadRequest: the connection cannot go on)."""
    frames = FrameReader(conn)
    while (body := frames.read()) is not None:
        try:
            request = pb.ReadRequest.FromString(body)
        except DecodeError as exc:
            raise FramingError(f"a frame of {len(body)} bytes is not a ReadRequest: {exc}") from None
        send_frame(conn, answer(request, identity))
