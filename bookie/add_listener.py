"""The add listener: the Add stream over plain TCP (docs/add-transport.md), for low add latency.

The gRPC Add stream costs several thread hand-offs per message on each side in Python (gRPC's
poller, the handler's request iterator, the response path), and on a small VM every wake-up of
an idle CPU is expensive. Here one thread per connection reads a frame, hands the AddRequest to
the same AddHandler the gRPC service uses (which journals a lone batch inline in this thread) and
writes the AddResponse back: one wake-up per request. Clients find the listener through the
bookie's registration (BookieInfo.add_address); bookies started with --add-port -1 have none,
and clients then add over gRPC. The same listener serves read connections (a hello of their own:
bookie/read_connection.py), the bulk range reads' transport.

Bounds: at most `connections_max` connections, and `per_peer_max` from one client address (more
are refused at accept: one host cannot take every connection), a hello within HELLO_TIMEOUT_S,
frames of at most FRAME_BYTES_MAX, a response send that stalls for add_framing.SEND_TIMEOUT_S (a
client that stopped reading) closes the connection, and so does `idle_timeout_s` without a byte
from the client (an idle connection, or a half-open one whose client vanished, issue 31 item 3).
The idle bound is the socket's SO_RCVTIMEO, so the per-request path makes no extra call for it;
clients reconnect on their next add and resend what the close caught in flight
(pyspark_ledger/transport/add_streams.py).
"""

from __future__ import annotations

import logging
import socket
import ssl
import struct
import threading
import time

from google.protobuf.message import DecodeError

from bookie.add_handler import AddHandler, encode_add_response
from bookie.add_runs import parse_add_request
from bookie.proto.add_framing import (
    HELLO_BYTES,
    MAGIC,
    READ_MAGIC,
    FrameReader,
    FramingError,
    frame,
    hello,
    parse_hello,
    prepare_socket,
    recv_exactly,
    start_frames,
)
from bookie.proto.versions import OUR_RANGE
from bookie.read_connection import ReadAnswer, serve_reads
from bookie.slots import KeyedSlots
from bookie.storage.errors import ensure
from bookie.tls import cert_identity

log = logging.getLogger(__name__)

HELLO_TIMEOUT_S = 5.0
CONNECTIONS_MAX_DEFAULT = 256
PER_PEER_MAX_DEFAULT = 64
IDLE_TIMEOUT_S_DEFAULT = 300.0
_ACCEPT_ERROR_PAUSE_S = 0.1  # e.g. out of file descriptors: do not spin
_TLS_HANDSHAKE_BYTE = 0x16  # a TLS record of type handshake: how a ClientHello begins


def _linger_close(conn: socket.socket) -> None:
    """Close a refused connection without a TCP reset: a close with the client's bytes unread
    resets the connection, and the client would then see 'connection reset' instead of the TLS
    alert or the end of stream that says why. Bounded: 1 s, 64 KiB."""
    try:
        if isinstance(conn, ssl.SSLSocket):
            conn = socket.socket(fileno=conn.detach())
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(1.0)
        drained = 0
        while drained < 64 * 1024 and (chunk := conn.recv(4096)):
            drained += len(chunk)
    except OSError:
        pass  # the client went first
    finally:
        conn.close()


def _set_recv_timeout(sock: socket.socket, seconds: float) -> None:
    """Bound blocking receives at the OS level (SO_RCVTIMEO): a receive that waits longer fails
    with EAGAIN (BlockingIOError, or ssl.SSLWantReadError under TLS), at no cost per receive."""
    whole = int(seconds)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", whole, int((seconds - whole) * 1e6)))


def _peer_host(peer: object) -> str:
    return str(peer[0]) if isinstance(peer, tuple) and peer else str(peer)


class AddListener:
    def __init__(self, handler: AddHandler, host: str, port: int, *, connections_max: int = CONNECTIONS_MAX_DEFAULT,
                 ssl_context: ssl.SSLContext | None = None, allow_plaintext: bool = False,
                 per_peer_max: int = PER_PEER_MAX_DEFAULT, idle_timeout_s: float = IDLE_TIMEOUT_S_DEFAULT,
                 reads: ReadAnswer | None = None):
        """ssl_context: TLS on every connection (bookie/tls.py), plaintext ones refused unless
        allow_plaintext (told apart by their first byte). reads: what answers read connections
        (bookie/read_connection.py); None: none are accepted (their hello is refused as not an
        add hello, as by a bookie of an earlier release)."""
        ensure(idle_timeout_s > 0 and per_peer_max >= 1 and connections_max >= 1, "add listener bounds out of range")
        self.handler = handler
        self._reads = reads
        self.connections_max = connections_max
        self.idle_timeout_s = idle_timeout_s
        self._slots = KeyedSlots(connections_max, min(per_peer_max, connections_max), "connections")
        self._ssl_context = ssl_context
        self._allow_plaintext = allow_plaintext
        # The verified client identity of each mutual-TLS connection, for authorization.
        self._identities: dict[socket.socket, str] = {}
        try:
            self._sock = socket.create_server((host, port), backlog=128)
        except OSError as exc:
            raise OSError(exc.errno, f"add listener cannot listen on {host}:{port}: {exc.strerror}") from exc
        self.port: int = self._sock.getsockname()[1]
        self._conns: dict[socket.socket, threading.Thread] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._acceptor = threading.Thread(target=self._accept_loop, name=f"add-accept {port}", daemon=True)

    def start(self) -> AddListener:
        self._acceptor.start()
        return self

    def connections(self) -> int:
        with self._lock:
            return len(self._conns)

    def peer_identities(self) -> list[str]:
        """The client certificate identities (bookie.tls.cert_identity) of the open connections."""
        with self._lock:
            return list(self._identities.values())

    def _secure(self, conn: socket.socket, peer: object) -> socket.socket:
        """The connection after the TLS handshake (or as is when plaintext is allowed and the client
        speaks it); FramingError for a refused one."""
        if self._ssl_context is None:
            return conn
        first = conn.recv(1, socket.MSG_PEEK)
        if first and first[0] != _TLS_HANDSHAKE_BYTE:
            if self._allow_plaintext:
                return conn
            _linger_close(conn)
            raise FramingError("a plaintext connection, and this bookie requires TLS")
        tls_conn = self._ssl_context.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
        try:
            tls_conn.do_handshake()
        except ssl.SSLError as exc:
            _linger_close(tls_conn)  # the alert we sent reaches the client (no reset first)
            detail = getattr(exc, "verify_message", None) or exc.reason or str(exc)
            raise FramingError(f"TLS handshake failed: {detail}") from None
        identity = cert_identity(tls_conn.getpeercert())
        with self._lock:  # close() must shut down the TLS socket (the raw one is detached now)
            thread = self._conns.pop(conn, None)
            if thread is not None:
                self._conns[tls_conn] = thread
            if identity:
                self._identities[tls_conn] = identity
        if identity:
            log.info("add connection peer=%s identity=%s", peer, identity)
        return tls_conn

    def _accept_loop(self) -> None:
        while True:
            try:
                conn, peer = self._sock.accept()
            except OSError as exc:
                if self._closed:
                    return
                log.warning("add listener accept failed error=%s", exc)
                time.sleep(_ACCEPT_ERROR_PAUSE_S)
                continue
            with self._lock:
                if self._closed:
                    conn.close()
                    return
                refusal = self._slots.try_take(_peer_host(peer))
                if refusal is not None:
                    log.warning("add connection refused peer=%s reason=%s", peer, refusal)
                    conn.close()
                    continue
                t = threading.Thread(target=self._serve, args=(conn, peer), name=f"add-conn {peer}", daemon=True)
                self._conns[conn] = t
            t.start()

    def _hello(self, conn: socket.socket, peer: object) -> tuple[bytes | None, str]:
        """The client's hello answered: the kind of connection it opens (add_framing.MAGIC or
        READ_MAGIC; None when this bookie does not speak the version it asks for, or the host
        holds as many read connections as it may), and the key of the slot the connection holds
        now: a read connection's moves to its host's read slots, bounded apart from its add
        connections, so a host's readers never take the slots its writers need."""
        data = recv_exactly(conn, HELLO_BYTES)
        magic = READ_MAGIC if data[:4] == READ_MAGIC and self._reads is not None else MAGIC
        asked = parse_hello(data, magic)
        slot = _peer_host(peer)
        if asked not in OUR_RANGE:
            # Our highest: a newer client that speaks it too (it read a registration of ours
            # from before a downgrade) reconnects asking for it; any other names both and stops.
            conn.sendall(hello(OUR_RANGE.high, magic))
            log.warning("add connection closed peer=%s reason=client asks for wire version %d, this bookie speaks %s",
                        peer, asked, OUR_RANGE)
            return None, slot
        if magic == READ_MAGIC:
            reads = f"{slot} reads"
            refusal = self._slots.try_take(reads)
            if refusal is not None:  # closed unanswered: the client reads over gRPC
                log.warning("read connection refused peer=%s reason=%s", peer, refusal)
                return None, slot
            try:
                conn.sendall(hello(asked, magic))
            except BaseException:
                self._slots.release(reads)
                raise
            self._slots.release(slot)
            return magic, reads
        conn.sendall(hello(asked, magic))  # accepted: every frame of this connection is of that version
        return magic, slot

    def _serve(self, conn: socket.socket, peer: object) -> None:
        raw = conn
        framing = False
        slot = _peer_host(peer)  # the slot the accept loop took
        try:
            prepare_socket(conn)
            conn.settimeout(min(HELLO_TIMEOUT_S, self.idle_timeout_s))
            conn = self._secure(conn, peer)
            magic, slot = self._hello(conn, peer)
            if magic is None:
                return
            start_frames(conn)
            framing = True
            # Idle or half-open: closed (clients reconnect). CPython's ssl retries a read that
            # SO_RCVTIMEO interrupted, so a TLS connection takes a socket timeout instead (it polls
            # only when no record is waiting, and bounds a stalled send the same way).
            if isinstance(conn, ssl.SSLSocket):
                conn.settimeout(self.idle_timeout_s)
            else:
                _set_recv_timeout(conn, self.idle_timeout_s)
            if magic == READ_MAGIC and self._reads is not None:
                with self._lock:
                    identity = self._identities.get(conn)
                serve_reads(conn, self._reads, identity)
                return
            frames = FrameReader(conn)
            while (body := frames.read()) is not None:
                try:
                    request, run_bodies = parse_add_request(body)
                except DecodeError as exc:
                    raise FramingError(f"a frame of {len(body)} bytes is not an AddRequest: {exc}") from None
                conn.sendall(frame([encode_add_response(self.handler.handle(request, run_bodies))]))
        except FramingError as exc:
            log.warning("add connection closed peer=%s reason=%s", peer, exc)
        except (TimeoutError, BlockingIOError, ssl.SSLWantReadError):
            if framing:
                log.info("add connection closed peer=%s reason=idle for %g s", peer, self.idle_timeout_s)
            else:
                log.warning("add connection closed peer=%s reason=no hello within %g s", peer,
                            min(HELLO_TIMEOUT_S, self.idle_timeout_s))
        except OSError as exc:
            # The client went away (what it sent still completes durably), or we are stopping.
            log.debug("add connection ended peer=%s error=%s", peer, exc)
        finally:
            conn.close()
            with self._lock:
                self._conns.pop(raw, None)
                self._conns.pop(conn, None)
                self._identities.pop(conn, None)
            self._slots.release(slot)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop accepting, end every connection (a request being journaled finishes first), and
        wait (bounded) for the connection threads."""
        with self._lock:
            self._closed = True
            conns = dict(self._conns)
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # not connected: fine for a listening socket on some kernels
        self._sock.close()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by its thread
        deadline = time.monotonic() + timeout_s
        for t in conns.values():
            t.join(max(0.0, deadline - time.monotonic()))
        self._acceptor.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in conns.values() if t.is_alive()]
        if stuck:
            log.warning("add connections still finishing at close threads=%s", stuck)
