"""The add listener's framing fuzzed with TLS on (a mutual-TLS bookie process): garbage before
the handshake, truncated handshakes, and after a good handshake random hellos, frame headers
(over the limit too), bodies that are not AddRequests and connections cut mid-frame. The bookie
survives every one (no traceback in its log) and then acknowledges a well-formed add."""

from __future__ import annotations

import random
import socket
import ssl
import struct
import threading
from collections.abc import Iterator

import pytest

from bookie.proto.add_framing import FRAME_BYTES_MAX, MAGIC, hello
from bookie.status import Status
from pyspark_ledger.protocol.digest import master_key
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.transport.bookie_client import BookieClient
from pyspark_ledger.transport.tls import TlsSettings
from tests.security.tls_helpers import add_addresses

SEED = 21
ROUNDS = 60
TIMEOUT_S = 5.0
DRAIN_S = 1.0  # a bookie waiting for the rest of a cut frame never closes: stop listening


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    # Ledger 0:777 is written raw, with no metadata: no ledger-key verification.
    with LocalCluster(1, work_dir=tmp_path_factory.mktemp("fuzz"), tls_client_auth=True,
                      bookie_args=["--no-verify-ledger-keys"]) as c:
        yield c


def _garbage_after_hello(rng: random.Random) -> bytes:
    kind = rng.randrange(5)
    if kind == 0:  # a hello of the wrong magic or length
        return rng.choice([b"XXXX" + hello(1)[4:], MAGIC, rng.randbytes(rng.randrange(1, 16))])
    if kind == 1:  # a header over the limit
        return hello(1) + struct.pack(">I", rng.randrange(FRAME_BYTES_MAX + 1, 2**32))
    if kind == 2:  # a body that is not an AddRequest
        body = rng.randbytes(rng.randrange(1, 200))
        return hello(1) + struct.pack(">I", len(body)) + body
    if kind == 3:  # cut inside a frame
        return hello(1) + struct.pack(">I", 1000) + rng.randbytes(rng.randrange(0, 999))
    return hello(1) + rng.randbytes(rng.randrange(1, 4096))  # noise


def _drain(sock: socket.socket) -> None:
    """Read until the bookie closes (or DRAIN_S: it may wait for the rest of a cut frame)."""
    sock.settimeout(DRAIN_S)
    try:
        while sock.recv(4096):
            pass
    except (OSError, ssl.SSLError):
        pass


def _one_round(rng: random.Random, host: str, port: int, tls: ssl.SSLContext) -> None:
    raw = socket.create_connection((host, port), timeout=TIMEOUT_S)
    try:
        if rng.random() < 0.3:  # before or inside the handshake
            raw.sendall(rng.choice([rng.randbytes(rng.randrange(1, 600)),
                                    b"\x16\x03\x01" + rng.randbytes(rng.randrange(0, 300))]))
            raw.shutdown(socket.SHUT_WR)
            _drain(raw)
            return
        with tls.wrap_socket(raw, server_hostname=host) as conn:
            conn.sendall(_garbage_after_hello(rng))
            if rng.random() < 0.5:
                return  # hang up at once
            _drain(conn)
    except (OSError, ssl.SSLError):
        pass  # the bookie hung up on us: expected
    finally:
        raw.close()


def test_fuzzed_tls_add_connections_crash_nothing(cluster: LocalCluster) -> None:
    bookie = cluster.bookies[0]
    address = add_addresses(cluster)[bookie.bookie_id]
    host, _, port = address.rpartition(":")
    settings = TlsSettings.from_values(**cluster.client_tls)
    assert settings is not None
    context = settings.ssl_context()
    rng = random.Random(SEED)
    for _ in range(ROUNDS):
        _one_round(rng, host, int(port), context)
    assert bookie.running
    answers: list[Status] = []
    done = threading.Event()
    with BookieClient(bookie.bookie_id, bookie.address, add_address=address, tls=settings) as client:
        client.add_batch((0, 777), master_key(b""), [(0, -1, b"still serving")],
                         lambda s, m: (answers.append(s), done.set()))
        assert done.wait(10.0)
    assert answers == [Status.OK]
    log_text = bookie.log_path.read_text(errors="replace")
    assert "Traceback" not in log_text
    assert "add connection closed" in log_text  # the fuzz did reach the listener's refusals
