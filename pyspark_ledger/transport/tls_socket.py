"""Reads and sends on a client's TLS add connection, and what a TLS failure means in words.

A plain add socket is read with recv(MSG_DONTWAIT) by the poller while other threads send with
blocking sendall. An SSL socket allows neither: recv takes no flags, and one SSL object must not
be read and written by two threads at once (OpenSSL). So the TLS socket is non-blocking, and
every read and send holds one lock; a send that finds the kernel buffer full waits (bounded, off
the lock only inside select) for room. Decrypted bytes can also sit inside the SSL object where
epoll and select() do not see them: recv_available drains them (`pending()`), and
AddStream.answers_waiting asks pending() too.
"""

from __future__ import annotations

import select
import ssl
import threading
import time

from bookie.proto.add_framing import SEND_TIMEOUT_S

# Bound on the bytes one recv_available returns (pending() is at most one TLS record, 16 KiB).
_DRAIN_BYTES_MAX = 1024 * 1024


class TlsSocketIO:
    def __init__(self, sock: ssl.SSLSocket):
        self.sock = sock
        self._lock = threading.Lock()

    def pending(self) -> int:
        try:
            return self.sock.pending()
        except (OSError, ValueError, AttributeError):
            return 0

    def recv_available(self, size: int) -> bytes | None:
        """Whatever complete records have arrived, decrypted (b"" at the end of the stream), or
        None when no complete record has (only part of one arrived: wait for readability)."""
        chunks: list[bytes] = []
        total = 0
        with self._lock:
            while total < _DRAIN_BYTES_MAX:
                try:
                    data = self.sock.recv(size)
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                    break
                except ssl.SSLZeroReturnError:
                    data = b""
                if not data:
                    if not chunks:
                        return b""
                    break
                chunks.append(data)
                total += len(data)
                if not self.sock.pending():
                    break
        if not chunks:
            return None
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def sendall(self, data: bytes) -> None:
        """All of data, or TimeoutError when the bookie takes none of it for SEND_TIMEOUT_S."""
        view = memoryview(data)
        deadline = time.monotonic() + SEND_TIMEOUT_S
        while view:
            wait_write = True
            with self._lock:
                try:
                    sent = self.sock.send(view)
                except ssl.SSLWantWriteError:
                    sent, wait_write = 0, True
                except ssl.SSLWantReadError:
                    sent, wait_write = 0, False
            if sent:
                view = view[sent:]
                deadline = time.monotonic() + SEND_TIMEOUT_S
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the bookie took no add data for {SEND_TIMEOUT_S:g} s")
            if wait_write:
                select.select([], [self.sock], [], min(left, 0.5))
            else:
                select.select([self.sock], [], [], min(left, 0.5))


def describe_tls_failure(exc: ssl.SSLError) -> str:
    """An SSL error as a sentence naming the likely problem (OpenSSL's reason code stays in it)."""
    text = str(exc)
    reason = (getattr(exc, "reason", None) or "").upper()
    hints = [
        ("CERTIFICATE_VERIFY_FAILED", "the bookie's certificate is not trusted by tls_ca (another CA?), expired, "
                                      "or does not name the bookie's host"),
        ("CERTIFICATE_REQUIRED", "the bookie requires a client certificate (set tls_cert and tls_key)"),
        ("UNKNOWN_CA", "the bookie does not trust our client certificate: it is signed by another CA"),
        ("CERTIFICATE_EXPIRED", "the bookie refused our client certificate: it has expired"),
        ("BAD_CERTIFICATE", "the bookie refused our client certificate"),
        ("WRONG_VERSION_NUMBER", "the bookie does not speak TLS on this port (plaintext listener?)"),
    ]
    for code, hint in hints:
        if code in reason or code.lower().replace("_", " ") in text.lower():
            return f"TLS handshake failed: {hint} ({text})"
    return f"TLS failure: {text}"
