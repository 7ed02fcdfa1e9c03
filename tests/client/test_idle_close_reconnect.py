"""Bookies close idle add connections (--idle-connection-timeout-s, issue 31 item 3); a writer
that adds about once per time-out must keep its ensemble and lose nothing.

Three real bookies with a 1 s idle time-out, plain and with mutual TLS (where the idle bound is
a socket timeout, not SO_RCVTIMEO); one writer (E=W=3, A=3, so a single failed bookie
would force an ensemble change) adds with gaps of 0.8-1.6 s, around the time-out, so that some
adds find their connection already closed and some cross the close on the wire (the client
resends those once on a new connection). Afterwards: one fragment (no ensemble change), every
entry reads back, and the bookies' logs show the idle closes happened.

That race is rare on a real idle close, so a second test makes it happen every time: a proxy in
front of one bookie's add listener swallows the first add and closes, and the writer must keep
its ensemble; with the resend knocked out in the test, the same scenario loses the bookie.
"""

from __future__ import annotations

import logging
import random
import socket
import threading
import time
from pathlib import Path

import pytest

from bookie.proto.add_framing import HELLO_BYTES, recv_exactly
from bookie.status import Status
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.testing.zookeeper_server import free_port
from pyspark_ledger.transport.add_streams import StreamedAdd
from pyspark_ledger.transport.bookie_client import BookieClient

IDLE_TIMEOUT_S = 1.0
ADDS = 6
SEED = 31


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "mutual-tls"])
def test_a_writer_adding_once_per_idle_timeout_keeps_its_ensemble(tmp_path: Path, tls: bool,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    rng = random.Random(SEED)
    print(f"seed={SEED}")
    caplog.set_level(logging.INFO, logger="pyspark_ledger.transport.add_streams")
    args = ["--idle-connection-timeout-s", str(IDLE_TIMEOUT_S)]
    with LocalCluster(3, work_dir=tmp_path / "cluster", bookie_args=args, tls=tls, tls_client_auth=tls) as cluster:
        with LedgerClient(cluster.metadata_uri, add_timeout_s=30, **cluster.client_tls) as client:  # type: ignore[arg-type]  # tls_* paths
            w = client.create_ledger(3, 3, 3)
            before = list(client.ledger_metadata(w.ledger_id).segments[-1].bookies)
            for i in range(ADDS):
                time.sleep(IDLE_TIMEOUT_S * rng.uniform(0.8, 1.6))
                assert w.add_entry(b"entry %d" % i) == i
            meta = client.ledger_metadata(w.ledger_id)
            assert len(meta.segments) == 1 and list(meta.segments[0].bookies) == before, meta
            w.close()
            got = [e.payload for e in client.open_ledger(w.ledger_id).read_entries(0, ADDS - 1)]
            assert got == [b"entry %d" % i for i in range(ADDS)]
        idle_closes = sum(b.log_path.read_text(errors="replace").count("reason=idle for") for b in cluster.bookies)
    resent = sum("resending adds on a new connection" in r.getMessage() for r in caplog.records)
    print(f"idle closes on the bookies={idle_closes} adds resent by the client={resent}")
    assert idle_closes >= 3  # the bookies did close idle connections under the writer


class ClosingProxy:
    """A TCP proxy in front of one bookie's add listener (the bookie advertises the proxy). Its
    first connection passes the hello both ways, then swallows the first request and closes: as a
    bookie's idle close that crosses an add on the wire. Later connections pass everything."""

    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.swallowed = 0
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, name="closing-proxy", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=10)
            self._open += [client, upstream]
            if self.connections == 1:
                threading.Thread(target=self._hello_then_close, args=(client, upstream), daemon=True).start()
            else:
                for a, b in ((client, upstream), (upstream, client)):
                    threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _hello_then_close(self, client: socket.socket, upstream: socket.socket) -> None:
        upstream.sendall(recv_exactly(client, HELLO_BYTES))
        client.sendall(recv_exactly(upstream, HELLO_BYTES))
        if client.recv(65536):
            self.swallowed += 1
        client.close()
        upstream.close()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()
        for s in self._open:
            s.close()


def _add_through_a_closing_proxy(tmp_path: Path) -> tuple[int, int, ClosingProxy]:
    """Three bookies, one behind a ClosingProxy; a writer on all three (A=3) adds 5 entries.
    Returns (fragments of the ledger, entries read back, the proxy)."""
    with LocalCluster(2, work_dir=tmp_path / "cluster") as cluster:
        add_port = free_port()
        proxy = ClosingProxy(add_port)
        try:
            cluster.add_bookie(extra_args=["--add-port", str(add_port),
                                           "--advertised-add-address", f"127.0.0.1:{proxy.port}"])
            with LedgerClient(cluster.metadata_uri, add_timeout_s=30) as client:
                w = client.create_ledger(3, 3, 3)
                try:
                    for i in range(5):
                        w.add_entry(b"entry %d" % i)
                except LedgerError as exc:
                    print(f"the writer failed: {exc}")
                fragments = len(client.ledger_metadata(w.ledger_id).segments)
                w.close()
                last = client.ledger_metadata(w.ledger_id).last_entry_id
                read = 0 if last is None or last < 0 else len(list(client.open_ledger(w.ledger_id).read_entries(0, last)))
            return fragments, read, proxy
        finally:
            proxy.close()


def test_an_add_that_crosses_the_bookies_close_is_resent_on_a_new_connection(tmp_path: Path) -> None:
    fragments, read, proxy = _add_through_a_closing_proxy(tmp_path)
    print(f"proxy connections={proxy.connections} swallowed requests={proxy.swallowed} fragments={fragments}")
    assert proxy.swallowed == 1 and proxy.connections >= 2  # the close did cross an add
    assert (fragments, read) == (1, 5)


def test_without_the_resend_that_close_changes_the_ensemble(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scenario above is a real test: with the client's resend knocked out (here, in the
    test), the crossed close fails bookie 2's add and the writer loses that bookie."""

    def fail_them(self: BookieClient, adds: list[StreamedAdd]) -> None:
        for add in adds:
            add.callback(Status.INTERNAL_ERROR, "transport: resend knocked out by the test")

    monkeypatch.setattr(BookieClient, "_resend", fail_them)
    fragments, read, proxy = _add_through_a_closing_proxy(tmp_path)
    print(f"without resend: swallowed={proxy.swallowed} fragments={fragments} read={read}")
    assert proxy.swallowed == 1
    assert (fragments, read) != (1, 5)
