"""Long polls and idle connections cannot stop a bookie (issue 31 item 3).

Against a real bookie with mutual TLS and --require-read-auth (tests/security/secured_cluster.py),
at the default bounds (--max-long-polls 16, --max-long-polls-per-client 4): eight client
certificates each send eight `ReadLac` long polls for a LAC that never comes (64 in all, 30 s
each), and 200 idle TCP connections are opened (100 to the gRPC port, 100 to the add listener).
Then:
- exactly 16 long polls wait, at most 4 per certificate, and the other 48 are refused at once
  with RESOURCE_EXHAUSTED and a message that says why;
- `Info` answers: 10 calls, median under 1 s and none over 5 s (the figures are printed);
- the add listener keeps at most --max-connections-per-peer (64) of one host's connections;
- a tailing reader, refused its long polls, still follows the ledger (a bounded wait and a plain
  LAC read per poll, no spinning: the bookie counts its refusals).
"""

from __future__ import annotations

import socket
import statistics
import threading
import time
import urllib.request
from pathlib import Path

import grpc

from bookie.proto import bookie_pb2 as pb
from bookie.proto import bookie_pb2_grpc as pb_grpc
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.protocol.digest import master_key
from pyspark_ledger.testing.zookeeper_server import free_port
from pyspark_ledger.transport.bookie_client import BookieClient, channel_options
from pyspark_ledger.transport.tls import TlsSettings
from tests.security.secured_cluster import secured_cluster

IDENTITIES = 8
POLLS_PER_IDENTITY = 8
MAX_LONG_POLLS = 16
PER_CLIENT = 4
PER_PEER_CONNECTIONS = 64
IDLE_CONNECTIONS = 200
INFO_CALLS = 10
PASSWORD = b"long-poll-pw"
REFUSAL_WAIT_S = 60.0


def _metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def _closed_by_peer(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_long_polls_and_idle_connections_leave_info_answering(tmp_path: Path) -> None:
    cluster, certs, _secret = secured_cluster(tmp_path, 1, require_read_auth=True)
    mport = free_port()
    cluster.bookie_args = [*cluster.bookie_args, "--metrics-port", str(mport)]
    with cluster:
        bookie = cluster.bookies[0]
        client = LedgerClient(cluster.metadata_uri, tls_ca=str(certs.ca), tls_cert=str(certs.client.cert),
                              tls_key=str(certs.client.key))
        w = client.create_ledger(1, 1, 1, password=PASSWORD)
        w.add_entry(b"first")
        key = (w.ledger_id.scope_id, w.ledger_id.id)
        request = pb.ReadLacRequest(ledger=pb.LedgerRef(scope_id=key[0], ledger_id=key[1]), long_poll_min_lac=10**9,
                                    long_poll_timeout_ms=30_000, master_key=master_key(PASSWORD))
        channels: list[grpc.Channel] = []
        polls: list[tuple[int, grpc.Future]] = []
        for i in range(IDENTITIES):
            pair = certs.authority.issue(f"poller-{i}", server=False)
            creds = TlsSettings.from_values(str(certs.ca), str(pair.cert), str(pair.key)).channel_credentials()
            channel = grpc.secure_channel(bookie.address, creds, options=channel_options())
            channels.append(channel)
            stub = pb_grpc.BookieStub(channel)
            polls += [(i, stub.ReadLac.future(request, timeout=60)) for _ in range(POLLS_PER_IDENTITY)]
        idle: list[socket.socket] = []
        info = client.pool.registry.get(bookie.bookie_id)
        assert info is not None and info.add_address, "the bookie registered no add listener"
        add_port = int(info.add_address.rsplit(":", 1)[1])
        try:
            for n in range(IDLE_CONNECTIONS):
                idle.append(socket.create_connection(("127.0.0.1", bookie.port if n % 2 else add_port), timeout=10))

            deadline = time.monotonic() + REFUSAL_WAIT_S
            while sum(f.done() for _, f in polls) < IDENTITIES * POLLS_PER_IDENTITY - MAX_LONG_POLLS:
                assert time.monotonic() < deadline, "long polls were not refused:\n" + bookie.tail_log()
                time.sleep(0.1)
            refused = [(i, f) for i, f in polls if f.done()]
            waiting = [i for i, f in polls if not f.done()]
            codes = sorted({f.code().name if f.exception() is not None else "OK" for _, f in refused})
            assert codes == ["RESOURCE_EXHAUSTED"], (codes, [f.details() for _, f in refused][:3], bookie.tail_log())
            assert "long poll refused: at the limit of" in refused[0][1].details()
            assert len(waiting) == MAX_LONG_POLLS, (len(waiting), bookie.tail_log())
            assert max(waiting.count(i) for i in range(IDENTITIES)) <= PER_CLIENT, waiting

            took: list[float] = []
            with BookieClient(bookie.bookie_id, bookie.address, tls=certs.tls("client")) as bc:
                for _ in range(INFO_CALLS):
                    started = time.monotonic()
                    assert bc.info(timeout_s=30).bookie_id == bookie.bookie_id
                    took.append(time.monotonic() - started)
            print(f"Info under {len(waiting)} waiting long polls, {len(refused)} refused and {IDLE_CONNECTIONS} idle "
                  f"connections: median {statistics.median(took) * 1000:.1f} ms, max {max(took) * 1000:.1f} ms")
            assert statistics.median(took) < 1.0 and max(took) < 5.0, took

            time.sleep(1.0)  # the refusals at accept reach their sockets
            open_add = [s for n, s in enumerate(idle) if n % 2 == 0 and not _closed_by_peer(s)]
            assert len(open_add) <= PER_PEER_CONNECTIONS, len(open_add)

            # A tailing reader is refused its long polls (16 wait already) and still follows.
            before = _metric(mport, "bookie_long_poll_refusals_total")
            reader = client.open_ledger(w.ledger_id, password=PASSWORD)
            threading.Timer(1.5, lambda: w.add_entry(b"second")).start()
            started = time.monotonic()
            got = [e.payload for e in reader.tail(0, idle_timeout_s=4.0)]
            spent = time.monotonic() - started
            refusals = _metric(mport, "bookie_long_poll_refusals_total") - before
            print(f"tail while long polls are full: {len(got)} entries in {spent:.1f} s, {refusals:.0f} refusals")
            assert got == [b"first", b"second"]
            assert 1 <= refusals <= 2 * spent + 2  # one bounded wait per refused poll: no spinning
        finally:
            for s in idle:
                s.close()
            for ch in channels:
                ch.close()
            client.close()
