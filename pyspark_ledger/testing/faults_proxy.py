"""A TCP proxy on 127.0.0.1 owned by a test, between clients and one server (a bookie's gRPC
port or its add listener), that can cut the link the ways a network does and heal it.

Modes (`TcpProxy.set_mode`):
- PASS: bytes flow both ways.
- BLACKHOLE: connections stay open but every byte is read and thrown away, both ways (a
  partition the peers only notice by timeouts; nothing is delivered late after the heal).
- PAUSE: nothing is read; bytes wait in kernel buffers and flow again on heal (a stall).
- DROP: every connection is reset and new ones are reset as soon as accepted (a crash-like cut).
`heal()` returns to PASS. Threads are daemons; every wait is bounded and `close()` ends them.
"""

from __future__ import annotations

import enum
import logging
import select
import socket
import struct
import threading
import time

log = logging.getLogger(__name__)

POLL_S = 0.05
CONNECT_TIMEOUT_S = 2.0
CHUNK_BYTES = 256 * 1024
CONNECTIONS_MAX = 512
JOIN_S = 2.0


class ProxyMode(enum.Enum):
    PASS = "pass"
    BLACKHOLE = "blackhole"
    PAUSE = "pause"
    DROP = "drop"


def _reset(sock: socket.socket) -> None:
    """Close with RST (linger 0), as a dropped connection looks to the peer."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


class _Link:
    """One proxied connection: a pump thread per direction."""

    def __init__(self, proxy: TcpProxy, downstream: socket.socket, upstream: socket.socket):
        self.proxy, self.down, self.up = proxy, downstream, upstream
        self.closed = threading.Event()
        self.threads = [
            threading.Thread(target=self._pump, args=(downstream, upstream), daemon=True, name="proxy-up"),
            threading.Thread(target=self._pump, args=(upstream, downstream), daemon=True, name="proxy-down"),
        ]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not self.closed.is_set():
                mode = self.proxy.mode
                if mode is ProxyMode.PAUSE:
                    time.sleep(POLL_S)
                    continue
                ready, _, _ = select.select([src], [], [], POLL_S)
                if not ready:
                    continue
                data = src.recv(CHUNK_BYTES)
                if not data:
                    dst.shutdown(socket.SHUT_WR)
                    return
                if self.proxy.mode is ProxyMode.BLACKHOLE:
                    continue
                self._send(dst, data)
        except OSError:
            pass
        finally:
            self.close()

    def _send(self, dst: socket.socket, data: bytes) -> None:
        """Send all of data, checking between parts whether the link was closed (a peer that
        stopped reading would otherwise block this thread forever)."""
        view = memoryview(data)
        while view and not self.closed.is_set():
            _, writable, _ = select.select([], [dst], [], POLL_S)
            if writable:
                view = view[dst.send(view):]

    def close(self, reset: bool = False) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        for s in (self.down, self.up):
            if reset:
                _reset(s)
            else:
                s.close()
        self.proxy._forget(self)


class TcpProxy:
    """`TcpProxy("127.0.0.1:3181").start()`; clients connect to `proxy.address`."""

    def __init__(self, target: str, port: int = 0):
        host, _, p = target.rpartition(":")
        self.target = (host, int(p))
        self.mode = ProxyMode.PASS
        self._links: set[_Link] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", port))
        self._listener.listen(128)
        self._listener.settimeout(POLL_S * 4)
        self.port = self._listener.getsockname()[1]
        self._accepter = threading.Thread(target=self._accept_loop, daemon=True, name=f"proxy-{self.port}")
        self.connections_made = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> TcpProxy:
        self._accepter.start()
        return self

    def set_mode(self, mode: ProxyMode) -> None:
        log.info("proxy %s -> %s:%d mode=%s", self.address, *self.target, mode.value)
        self.mode = mode
        if mode is ProxyMode.DROP:
            for link in self._snapshot():
                link.close(reset=True)

    def partition(self, mode: ProxyMode = ProxyMode.BLACKHOLE) -> None:
        self.set_mode(mode)

    def heal(self) -> None:
        self.set_mode(ProxyMode.PASS)

    def _snapshot(self) -> list[_Link]:
        with self._lock:
            return list(self._links)

    def _forget(self, link: _Link) -> None:
        with self._lock:
            self._links.discard(link)

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                down, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self.mode is ProxyMode.DROP or len(self._links) >= CONNECTIONS_MAX:
                _reset(down)
                continue
            try:
                up = socket.create_connection(self.target, timeout=CONNECT_TIMEOUT_S)
            except OSError:
                _reset(down)  # the server is down: the client sees a refused-like reset
                continue
            for s in (down, up):
                s.setblocking(True)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            link = _Link(self, down, up)
            with self._lock:
                self._links.add(link)
            self.connections_made += 1
            link.start()

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        for link in self._snapshot():
            link.close()
        self._accepter.join(JOIN_S)
        for link in self._snapshot():
            for t in link.threads:
                t.join(JOIN_S)

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
