"""docs/deployment.md's walkthrough on one machine: 127.0.0.2, 127.0.0.3 and 127.0.0.4 (Linux
routes all of 127.0.0.0/8 to loopback, no setup) play three hosts. Each runs a ZooKeeper server
started with the doc's own command line and configuration file (examples/zookeeper/, only the
values the file marks "change:" replaced: data directories, the hosts' addresses, ports) and a real
`bookie` bound to its own address with --host; a `ledger autorecovery` service and the client (this
process, on 127.0.0.1) are elsewhere. A bookie is killed -9 and autorecovery brings every copy back.
Then a bookie behind a TCP proxy (NAT, a container's port mapping) advertises the proxy's
addresses with --advertised-address / --advertised-add-address, and the client reaches it only
through the proxy."""

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
from tests.autorecovery.cluster_shape import Autorecovery, Written, check_every_copy, payload, wait_fully_replicated
from tests.deploy.doc_zookeeper import DocZooKeeper, ensemble_config, single_config

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


def test_the_docs_zookeeper_ensemble_bookies_and_autorecovery(tmp_path: Path, stop_after: list[HostBookie]) -> None:
    """Steps 2 to 5 of docs/deployment.md: the ensemble from examples/zookeeper/zoo-ensemble.cfg
    with the doc's start command, three bookies, autorecovery, a client; then step 4's promise:
    a bookie killed -9, and every ledger's copies are back on the two others with no command."""
    servers: list[DocZooKeeper] = []
    service: Autorecovery | None = None
    try:
        configs = ensemble_config(tmp_path / "zookeeper", HOSTS)
        servers.extend(DocZooKeeper(cfg, tmp_path / f"zk-{host}.log").start() for host, cfg in configs.items())
        modes = DocZooKeeper.wait_ensemble(servers)
        assert sorted(modes.values()) == ["follower", "follower", "leader"], modes
        for zk in servers:  # each server listens on its own address only
            assert _refused("127.0.0.1", zk.client_port)
        # Sessions of 4 s (the shortest 2 ticks allow): a killed bookie's registration goes soon.
        uri = f"zk://{','.join(zk.address for zk in servers)}/ledgers?session_timeout_ms=4000"

        bookies = [HostBookie(uri, tmp_path, h) for h in HOSTS]
        stop_after.extend(bookies)
        _start(bookies)
        with LedgerClient(uri) as client:
            registered = {info.bookie_id: info for info in client.bookies()}
        assert sorted(registered) == sorted(b.bookie_id for b in bookies)
        for b in bookies:
            info = registered[b.bookie_id]
            assert info.address == f"{b.host}:{b.port}", info
            assert info.add_address == f"{b.host}:{b.add_port}", info
            # bound to its own address only: the same ports on 127.0.0.1 are not this bookie
            assert _refused("127.0.0.1", b.port) and _refused("127.0.0.1", b.add_port)

        e3_ledger, ensemble = _write_and_read(uri, None, 3, 3, 2)  # step 5's client: E3/W3/A2
        assert sorted(ensemble) == sorted(b.bookie_id for b in bookies)
        with LedgerClient(uri) as client:
            # On three bookies an E3 ledger has nowhere to be re-replicated to (step 4 says so): its
            # mark would stay, and the check below wants none.
            client.delete_ledger(e3_ledger)

        service = Autorecovery(uri, tmp_path / "autorecovery.log")  # step 4, with a 3 s grace
        written = _write_ledgers_of_two(uri)
        victim = bookies[0]
        victim.kill()
        with LedgerClient(uri, add_timeout_s=30) as client:
            took = wait_fully_replicated(client, written, {victim.bookie_id})
            copies = check_every_copy(client, written)
        assert copies == 2 * sum(len(d) for d in written.entries.values())
        print(f"{len(written.entries)} ledgers back to 2 copies {took:.1f} s after the kill; {copies} copies read")
        assert service.stop() == 0, service.log()[-3000:]
        for b in bookies[1:]:
            assert b.stop() == 0, b.tail_log()
    finally:
        if service is not None:
            service.kill()
        for b in stop_after:
            b.stop()
        for zk in servers:
            zk.stop()


def test_the_docs_single_zookeeper_serves(tmp_path: Path) -> None:
    """docs/deployment.md's one-host ZooKeeper: examples/zookeeper/zoo-single.cfg, the same start
    command, a standalone server on 127.0.0.1 that a client uses."""
    zk = DocZooKeeper(single_config(tmp_path / "zookeeper"), tmp_path / "zk.log").start()
    try:
        assert DocZooKeeper.wait_ensemble([zk]) == {zk.address: "standalone"}
        with LedgerClient(f"zk://{zk.address}/ledgers") as client:
            assert client.bookies() == []
    finally:
        zk.stop()


def _write_ledgers_of_two(uri: str, ledgers: int = 12, entries: int = 20) -> Written:
    """Ledgers of ensemble 2 (E2/W2/A2) on the three bookies: when one dies, the third is where
    its copies go (docs/deployment.md, step 4)."""
    out = Written()
    with LedgerClient(uri, add_timeout_s=30) as client:
        for i in range(ledgers):
            w = client.create_ledger(2, 2, 2)
            data = [payload(i, e, 100 + 50 * e) for e in range(entries)]
            for f in [w.add_entry_async(p) for p in data]:
                f.result(timeout=120)
            w.close()
            out.entries[w.ledger_id] = data
    return out


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
