"""docs/deployment.md's walkthrough on one machine: 127.0.0.2, 127.0.0.3 and 127.0.0.4 (Linux
routes all of 127.0.0.0/8 to loopback, no setup) play three hosts, each running a real `bookie`
bound to its own address with --host, on a real ZooKeeper; the client (this process, on
127.0.0.1) is elsewhere. Then a bookie behind a TCP proxy (NAT, a container's port mapping)
advertises the proxy's addresses with --advertised-address / --advertised-add-address, and the
client reaches it only through the proxy."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyspark_ledger import LedgerClient
from pyspark_ledger.errors import ReadError
from pyspark_ledger.testing.faults_proxy import ProxyMode, TcpProxy
from pyspark_ledger.testing.local_cluster import LocalBookie
from pyspark_ledger.testing.zookeeper_server import free_port

HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
BEHIND_PROXY_HOST = "127.0.0.5"
ENTRIES = 50
RPC_TIMEOUT_S = 3.0


class HostBookie(LocalBookie):
    """A bookie as docs/deployment.md starts it on a host: `bookie --metadata-uri ... --data-dir
    ... --host <its address> --port ... --add-port ...` and nothing else (its id defaults to
    host:port); `reach` is where the readiness check connects (the advertised address)."""

    def __init__(self, metadata_uri: str, work_dir: Path, host: str, extra_args: list[str] | None = None,
                 reach: str | None = None):
        self.host, self.add_port = host, free_port()
        super().__init__(metadata_uri, work_dir / host, extra_args=extra_args, log_path=work_dir / f"{host}.log")
        self.bookie_id = f"{host}:{self.port}"
        self.reach = reach or self.bookie_id

    @property
    def address(self) -> str:
        return self.reach

    def command(self) -> list[str]:
        return [sys.executable, "-m", "bookie.server", "--metadata-uri", self.metadata_uri,
                "--data-dir", str(self.data_dir), "--host", self.host, "--port", str(self.port),
                "--add-port", str(self.add_port), *self.extra_args]


def _refused(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=1.0).close()
    except ConnectionRefusedError:
        return True
    return False


def _start(bookies: list[HostBookie]) -> None:
    for b in bookies:
        b.start(wait=False)
    for b in bookies:
        b.wait_serving()


@pytest.fixture
def stop_after() -> Iterator[list[HostBookie]]:
    started: list[HostBookie] = []
    yield started
    for b in started:
        b.stop()


def _write_and_read(uri: str, ensemble: list[str] | None, e: int, w: int, a: int) -> tuple[object, list[str]]:
    payloads = [f"entry {i} ".encode() * (i + 1) for i in range(ENTRIES)]
    with LedgerClient(uri, rpc_timeout_s=RPC_TIMEOUT_S) as client:
        handle = client.create_ledger(e, w, a, ensemble=ensemble)
        for p in payloads:
            handle.add_entry(p)
        handle.close()
        lid = handle.ledger_id
        ensemble_used = list(client.ledger_metadata(lid).segments[-1].bookies)
    with LedgerClient(uri, rpc_timeout_s=RPC_TIMEOUT_S) as reader:  # a client that only knows the metadata URI
        r = reader.open_ledger(lid)
        assert r.last_add_confirmed() == ENTRIES - 1
        assert [x.payload for x in r.read_entries(0, ENTRIES - 1)] == payloads
    return lid, ensemble_used


def test_three_bookies_on_three_hosts_advertise_their_own_host(zk_uri: str, tmp_path: Path,
                                                               stop_after: list[HostBookie]) -> None:
    bookies = [HostBookie(zk_uri, tmp_path, h) for h in HOSTS]
    stop_after.extend(bookies)
    _start(bookies)

    with LedgerClient(zk_uri) as client:
        registered = {info.bookie_id: info for info in client.bookies()}
    assert sorted(registered) == sorted(b.bookie_id for b in bookies)
    for b in bookies:
        info = registered[b.bookie_id]
        assert info.address == f"{b.host}:{b.port}", info
        assert info.add_address == f"{b.host}:{b.add_port}", info
        # bound to its own address only: the same ports on 127.0.0.1 are not this bookie
        assert _refused("127.0.0.1", b.port) and _refused("127.0.0.1", b.add_port)

    _, ensemble = _write_and_read(zk_uri, None, 3, 3, 2)
    assert sorted(ensemble) == sorted(b.bookie_id for b in bookies)


def test_a_bookie_behind_a_proxy_is_reached_only_through_it(zk_uri: str, tmp_path: Path,
                                                            stop_after: list[HostBookie]) -> None:
    port, add_port = free_port(), free_port()
    grpc_proxy = TcpProxy(f"{BEHIND_PROXY_HOST}:{port}").start()
    add_proxy = TcpProxy(f"{BEHIND_PROXY_HOST}:{add_port}").start()
    try:
        bookie = HostBookie(zk_uri, tmp_path, BEHIND_PROXY_HOST, reach=grpc_proxy.address,
                            extra_args=["--advertised-address", grpc_proxy.address,
                                        "--advertised-add-address", add_proxy.address])
        bookie.port, bookie.add_port = port, add_port
        bookie.bookie_id = f"{BEHIND_PROXY_HOST}:{port}"
        stop_after.append(bookie)
        _start([bookie])

        with LedgerClient(zk_uri) as client:
            info = client.bookies()[0]
        assert info.bookie_id == bookie.bookie_id  # the id stays the bookie's own host:port
        assert info.address == grpc_proxy.address and info.add_address == add_proxy.address
        assert _refused("127.0.0.1", port) and _refused("127.0.0.1", add_port)

        grpc_before, add_before = grpc_proxy.connections_made, add_proxy.connections_made
        lid, ensemble = _write_and_read(zk_uri, [bookie.bookie_id], 1, 1, 1)
        assert ensemble == [bookie.bookie_id]
        assert grpc_proxy.connections_made > grpc_before, "reads went around the gRPC proxy"
        assert add_proxy.connections_made > add_before, "adds went around the add proxy"

        # The proxy is the only way in: with it cutting every connection, a new client cannot read.
        grpc_proxy.set_mode(ProxyMode.DROP)
        add_proxy.set_mode(ProxyMode.DROP)
        with LedgerClient(zk_uri, rpc_timeout_s=RPC_TIMEOUT_S) as cut_off:
            r = cut_off.open_ledger(lid)  # metadata only: ZooKeeper is reachable
            with pytest.raises(ReadError) as refused:
                list(r.read_entries(0, ENTRIES - 1))
        assert bookie.bookie_id in str(refused.value)
        print(f"read with the proxy cutting connections: {type(refused.value).__name__}: {refused.value}")
        grpc_proxy.heal()
        add_proxy.heal()
        with LedgerClient(zk_uri, rpc_timeout_s=RPC_TIMEOUT_S) as healed:
            assert len(list(healed.open_ledger(lid).read_entries(0, ENTRIES - 1))) == ENTRIES
    finally:
        for b in stop_after:
            b.stop()  # before its proxies go: a bookie never needs them to stop
        grpc_proxy.close()
        add_proxy.close()
