"""The client's TLS add socket (pyspark_ledger.transport.tls_socket): decrypted bytes that sit in
the SSL object are invisible to select(), and recv_available drains them, so the poller (which
waits on the socket's fd) never leaves an answer unread."""

from __future__ import annotations

import select
import socket
import ssl
import threading
import time
from pathlib import Path

from bookie.tls import server_ssl_context
from pyspark_ledger.testing.certs import make_test_certificates
from pyspark_ledger.transport.tls import TlsSettings
from pyspark_ledger.transport.tls_socket import TlsSocketIO

RECORD = b"r" * 5000


def _tls_pair(tmp_path: Path) -> tuple[ssl.SSLSocket, ssl.SSLSocket]:
    certs = make_test_certificates(tmp_path)
    server_ctx = server_ssl_context(str(certs.bookie.cert), str(certs.bookie.key), None, False)
    client_ctx = TlsSettings(certs.ca).ssl_context()
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[ssl.SSLSocket] = []
    t = threading.Thread(target=lambda: accepted.append(server_ctx.wrap_socket(listener.accept()[0], server_side=True)))
    t.start()
    client = client_ctx.wrap_socket(socket.create_connection(listener.getsockname(), timeout=5.0),
                                    server_hostname="127.0.0.1")
    t.join(5.0)
    listener.close()
    return client, accepted[0]


def _readable(sock: socket.socket) -> bool:
    return bool(select.select([sock], [], [], 0.2)[0])


def test_bytes_left_in_the_ssl_object_are_seen_and_drained(tmp_path: Path) -> None:
    client, server = _tls_pair(tmp_path)
    try:
        server.sendall(RECORD)  # one TLS record
        assert _readable(client)
        assert client.recv(10) == RECORD[:10]  # the whole record was decrypted, 10 bytes taken
        io = TlsSocketIO(client)
        assert io.pending() == len(RECORD) - 10
        assert not _readable(client)  # what select() (and epoll) cannot see
        client.setblocking(False)
        assert io.recv_available(64) == RECORD[10:]  # drained in one call, though 64 < what is pending
        assert io.pending() == 0
        assert io.recv_available(64) is None  # nothing complete has arrived: no blocking
    finally:
        client.close()
        server.close()


def test_sendall_on_the_non_blocking_socket_delivers_everything(tmp_path: Path) -> None:
    client, server = _tls_pair(tmp_path)
    try:
        client.setblocking(False)
        data = bytes(range(256)) * 8192  # 2 MiB: more than the socket buffers hold at once
        received = bytearray()

        def read() -> None:
            deadline = time.monotonic() + 20.0
            while len(received) < len(data) and time.monotonic() < deadline:
                received.extend(server.recv(65536))

        reader = threading.Thread(target=read)
        reader.start()
        TlsSocketIO(client).sendall(data)
        reader.join(25.0)
        assert bytes(received) == data
    finally:
        client.close()
        server.close()
