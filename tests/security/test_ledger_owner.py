"""A ledger belongs to the key its metadata names (issue 31, item 2), on three real bookie
processes with mutual TLS, an operator secret and a real ZooKeeper (reads open, so that a
fencing Read reaches its fence: with --require-read-auth it is refused earlier, PERMISSION_DENIED).

A stranger with an ordinary client certificate sends WriteLac, Fence (both RPCs: Fence and a
fencing Read) and Add for the next two scope-0 ids, which no ledger has yet, to every bookie: all
refused (UNAUTHORIZED, "no such ledger in metadata"), 0 bytes changed on disk. The application
then creates those ledgers; the stranger's calls are refused again ("does not match the verifier");
the writer's adds, its recovery by another client, and reads all succeed. A ledger made while
the cluster setting ledger_key_verifiers is off keeps trust on first write (docs/security.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from bookie.proto import bookie_pb2 as pb
from bookie.proto import bookie_pb2_grpc as pb_grpc
from bookie.status import Status
from metadata.cluster_settings import update_cluster_settings
from metadata.key_verifier import KEY as VERIFIER_KEY
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.transport.bookie_client import channel_options
from tests.security.secured_cluster import SecuredCerts, secured_cluster
from tests.security.tls_helpers import disk_snapshot

PASSWORD = "the application's password"
STRANGER_KEY = hashlib.sha256(b"ledger" + b"the stranger's own password").digest()
TIMEOUT_S = 30.0
ENTRIES = 10


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, SecuredCerts]]:
    from pyspark_ledger.testing.zookeeper_server import LocalZooKeeper

    work = tmp_path_factory.mktemp("ledger-owner")
    with LocalZooKeeper(Path(work) / "zk") as zk:
        cluster, certs, _ = secured_cluster(work, 3, metadata_uri=zk.uri("/owner"),
                                          require_read_auth=False)  # so a fencing Read reaches its fence
        cluster.bookie_args += ["--gc-interval-s", "0", "--checkpoint-interval-s", "3600"]  # no background writes
        with cluster:
            yield cluster, certs


def stranger_calls(stub: Any, ledger: tuple[int, int]) -> dict[str, tuple[int, str]]:
    """(status, message) of each write a stranger tries with its own key on `ledger`."""
    ref = pb.LedgerRef(scope_id=ledger[0], ledger_id=ledger[1])
    lac = stub.WriteLac(pb.WriteLacRequest(ledger=ref, master_key=STRANGER_KEY, lac=5), timeout=TIMEOUT_S,
                        wait_for_ready=True)  # a loaded machine may be slow to hand shake
    fence = stub.Fence(pb.FenceRequest(ledger=ref, master_key=STRANGER_KEY), timeout=TIMEOUT_S)
    fence_read = stub.Read(pb.ReadRequest(ledger=ref, first_entry_id=0, last_entry_id=0, fence=True,
                                          master_key=STRANGER_KEY), timeout=TIMEOUT_S)
    adds = list(stub.Add(iter([pb.AddRequest(batches=[pb.AddBatch(
        request_id=1, ledger=ref, master_key=STRANGER_KEY, entry_ids=[0], lacs=[-1], entries=[b"claim"])])]),
        timeout=TIMEOUT_S))
    add = adds[0].results[0]
    return {"WriteLac": (lac.status, lac.message), "Fence": (fence.status, fence.message),
            "FenceRead": (fence_read.status, fence_read.message), "Add": (add.status, add.message)}


def every_stranger_call_refused(cluster: LocalCluster, certs: SecuredCerts, ledgers: list[tuple[int, int]],
                                reason: str) -> None:
    for bookie in cluster.bookies:
        channel = grpc.secure_channel(bookie.address, certs.tls("client").channel_credentials(),
                                      options=channel_options())
        try:
            stub = pb_grpc.BookieStub(channel)
            for ledger in ledgers:
                for op, (status, message) in stranger_calls(stub, ledger).items():
                    assert status == Status.UNAUTHORIZED, (bookie.bookie_id, ledger, op, Status(status).name, message)
                    assert f"ledger {ledger[0]}:{ledger[1]}" in message and reason in message, (op, message)
        finally:
            channel.close()


def test_a_stranger_cannot_claim_future_ledgers_and_the_writer_keeps_them(
        secured: tuple[LocalCluster, SecuredCerts]) -> None:
    cluster, certs = secured
    with LedgerClient(cluster.metadata_uri, **cluster.client_tls) as client:
        first = client.create_ledger(3, 3, 2, password=PASSWORD)
        first.close()
        upcoming = [(0, first.ledger_id.id + 1), (0, first.ledger_id.id + 2)]
        before = disk_snapshot(cluster)
        every_stranger_call_refused(cluster, certs, upcoming, "no such ledger in metadata")
        assert disk_snapshot(cluster) == before, "a refused call changed bytes on disk"

        writers = [client.create_ledger(3, 3, 2, password=PASSWORD) for _ in upcoming]
        assert [(w.ledger_id.scope_id, w.ledger_id.id) for w in writers] == upcoming
        assert all(VERIFIER_KEY in client.ledger_metadata(w.ledger_id).custom for w in writers)
        every_stranger_call_refused(cluster, certs, upcoming, "does not match the verifier")
        assert disk_snapshot(cluster) == before

        payloads = [b"acknowledged %d" % i for i in range(ENTRIES)]
        for w in writers:
            for p in payloads:
                w.add_entry(p)
        crashed = writers[0]  # its writer stops without closing: another client recovers it
        writers[1].close()
    with LedgerClient(cluster.metadata_uri, **cluster.client_tls) as recoverer:
        recovered = recoverer.open_ledger(crashed.ledger_id, recovery=True, password=PASSWORD)
        assert recovered.last_add_confirmed() == ENTRIES - 1
        assert [e.payload for e in recovered.read_entries(0, ENTRIES - 1)] == payloads
        closed = recoverer.open_ledger(writers[1].ledger_id, password=PASSWORD)
        assert [e.payload for e in closed.read_entries(0, ENTRIES - 1)] == payloads


def test_a_ledger_made_without_a_verifier_keeps_trust_on_first_write(
        secured: tuple[LocalCluster, SecuredCerts]) -> None:
    cluster, certs = secured
    with LedgerClient(cluster.metadata_uri, **cluster.client_tls) as client:
        update_cluster_settings(client.store, {"ledger_key_verifiers": False})
        try:
            import time
            for _ in range(200):  # the client's settings watch: bounded wait
                if not client.cluster_settings.ledger_key_verifiers:
                    break
                time.sleep(0.05)
            legacy = client.create_ledger(3, 3, 2, password=PASSWORD)
        finally:
            update_cluster_settings(client.store, {"ledger_key_verifiers": None})
        assert VERIFIER_KEY not in client.ledger_metadata(legacy.ledger_id).custom
        bookie = cluster.bookies[0]
        channel = grpc.secure_channel(bookie.address, certs.tls("client").channel_credentials(),
                                      options=channel_options())
        try:
            key = (legacy.ledger_id.scope_id, legacy.ledger_id.id)
            ref = pb.LedgerRef(scope_id=key[0], ledger_id=key[1])
            answer = pb_grpc.BookieStub(channel).WriteLac(pb.WriteLacRequest(ledger=ref, master_key=STRANGER_KEY,
                                                                             lac=-1), timeout=TIMEOUT_S)
            assert answer.status == Status.OK  # the reference protocol's trust on first write, as before
        finally:
            channel.close()
