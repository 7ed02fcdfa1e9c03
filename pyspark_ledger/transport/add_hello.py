"""Opening a plain-TCP add connection: connect, TLS, and the hello that settles the wire version.

The client asks for the highest wire version both it and the bookie support (the bookie's range
comes from its registration, bookie/proto/versions.py); the bookie echoes the version when it
speaks it, else answers with its own highest and closes. A lower answer this client also speaks
means the registration claimed more than the bookie speaks (a bookie downgraded since the client
read it): the client connects once more asking for that. Anything else fails naming both sides.
"""

from __future__ import annotations

import logging
import socket
import ssl

from bookie.proto.add_framing import HELLO_BYTES, FramingError, hello, parse_hello, prepare_socket, recv_exactly, start_frames
from bookie.proto.versions import OUR_RANGE, WireRange, WireVersionError, negotiate
from pyspark_ledger.errors import BookieUnavailableError
from pyspark_ledger.transport.tls_socket import describe_tls_failure

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0  # TCP connect plus the hello exchange

_HELLO_REFUSED_PLAIN = ("the bookie closed the connection at the hello (does it require TLS? set tls_ca, "
                        "and tls_cert/tls_key for mutual TLS)")
_HELLO_REFUSED_TLS = ("the bookie closed the TLS connection at the hello (does it require a client certificate? "
                      "set tls_cert/tls_key to one signed by the bookie's CA)")


def open_add_connection(bookie_id: str, address: str, ssl_context: ssl.SSLContext | None,
                        bookie_range: WireRange | None) -> tuple[socket.socket, int]:
    """A connection to the add listener at `address` after the hello, and its wire version.
    bookie_range None (the bookie's is not known): ask for this client's highest. Every failure
    is a BookieUnavailableError naming the address."""
    try:
        asked = negotiate(OUR_RANGE, OUR_RANGE if bookie_range is None else bookie_range)
    except WireVersionError as exc:
        raise BookieUnavailableError(bookie_id, f"add listener {address}: {exc}") from None
    sock, answered = _hello(bookie_id, address, ssl_context, asked)
    if answered == asked:
        return sock, asked
    sock.close()  # the bookie closes its side too
    if answered in OUR_RANGE and answered < asked:
        log.info("bookie speaks an older wire version than registered, reconnecting bookie=%s asked=%d answered=%d",
                 bookie_id, asked, answered)
        sock, again = _hello(bookie_id, address, ssl_context, answered)
        if again == answered:
            return sock, answered
        sock.close()
    raise BookieUnavailableError(bookie_id, f"add listener {address}: the bookie speaks add protocol version "
                                 f"{answered}, this client {OUR_RANGE} (asked for {asked})")


def _hello(bookie_id: str, address: str, ssl_context: ssl.SSLContext | None, asked: int) -> tuple[socket.socket, int]:
    """Connect and exchange hellos asking for `asked`: the socket and the version the bookie answered."""
    host, _, port = address.rpartition(":")
    try:
        sock = socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S)
    except (OSError, ValueError) as exc:
        raise BookieUnavailableError(bookie_id, f"add listener {address}: {exc}") from None
    try:
        prepare_socket(sock)
        if ssl_context is not None:
            sock = ssl_context.wrap_socket(sock, server_hostname=host.strip("[]"))
        sock.sendall(hello(asked))
        reply = recv_exactly(sock, HELLO_BYTES)
        if not reply:
            raise FramingError(_HELLO_REFUSED_TLS if ssl_context else _HELLO_REFUSED_PLAIN)
        answered = parse_hello(reply)
        start_frames(sock)
        if isinstance(sock, ssl.SSLSocket):
            sock.setblocking(False)  # see tls_socket.TlsSocketIO
        return sock, answered
    except ssl.SSLError as exc:
        sock.close()
        raise BookieUnavailableError(bookie_id, f"add listener {address}: {describe_tls_failure(exc)}") from None
    except (OSError, FramingError) as exc:
        sock.close()
        raise BookieUnavailableError(bookie_id, f"add listener {address}: {exc}") from None
