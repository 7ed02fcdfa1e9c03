"""Issue 31, item 1, against a real bookie process with mutual TLS: a client certificate of the
cluster's CA whose name embeds the operator's name (`mallory,ledger-operator`, a newline, a NUL
byte, a wildcard, an empty or very long name, a common name with a comma) gets no operator
rights: LedgerKey and DeleteLedger of a closed ledger are refused and not one byte changes on
disk, while the real operator certificate (and one naming the operator as one SAN among others)
still fetches the key and deletes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from bookie.proto import bookie_pb2 as pb
from bookie.proto import bookie_pb2_grpc as pb_grpc
from bookie.status import Status
from metadata.ids import LedgerId
from pyspark_ledger import LedgerClient
from pyspark_ledger.protocol.digest import master_key
from pyspark_ledger.testing.certs import CertPair
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.transport.bookie_client import channel_options
from pyspark_ledger.transport.tls import TlsSettings
from tests.security.secured_cluster import OPERATOR_NAME, SecuredCerts, secured_cluster
from tests.security.tls_helpers import disk_snapshot

PASSWORD = "pw-of-the-closed-ledger"
# Every call waits for its channel (wait_for_ready): on a loaded machine a first TLS handshake can
# time out and gRPC would fail the call at once; the handshakes here all succeed (same CA).
TIMEOUT_S = 60.0  # generous: a shared 2-core machine
# kind: (certificate name, its DNS SANs; () leaves the common name as its identity)
HOSTILE: dict[str, tuple[str, tuple[str, ...]]] = {
    "comma SAN": ("hostile-comma", (f"mallory,{OPERATOR_NAME}",)),
    "newline SAN": ("hostile-newline", (f"mallory\n{OPERATOR_NAME}",)),
    "NUL SAN": ("hostile-nul", (f"{OPERATOR_NAME}\x00mallory",)),
    "wildcard SAN": ("hostile-wildcard", ("*",)),
    "empty SAN": ("hostile-empty", ("",)),
    "very long SAN": ("hostile-long", (OPERATOR_NAME + "x" * 4000,)),
    "comma common name": (f"mallory,{OPERATOR_NAME}", ()),
}


def _stub(cluster: LocalCluster, certs: SecuredCerts, pair: CertPair) -> tuple[grpc.Channel, pb_grpc.BookieStub]:
    tls = TlsSettings.from_values(str(certs.ca), str(pair.cert), str(pair.key))
    assert tls is not None
    channel = grpc.secure_channel(cluster.bookies[0].address, tls.channel_credentials(), options=channel_options())
    return channel, pb_grpc.BookieStub(channel)


def _outcome(call: Callable[[], Any]) -> str:
    try:
        answer = call()
    except grpc.RpcError as exc:
        return f"{exc.code().name} {exc.details()}"
    return f"status {Status(answer.status).name}"


Ledgers = tuple[LocalCluster, SecuredCerts, dict[str, LedgerId]]


def _ref(ledger_id: LedgerId) -> pb.LedgerRef:
    return pb.LedgerRef(scope_id=ledger_id.scope_id, ledger_id=ledger_id.id)


@pytest.fixture(scope="module")
def closed_ledgers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ledgers]:
    """Two closed ledgers: "kept" (the hostile callers try to delete it), "doomed" (the operator
    deletes it)."""
    cluster, certs, _ = secured_cluster(tmp_path_factory.mktemp("hostile-identities"), 1)
    cluster.bookie_args += ["--gc-interval-s", "0", "--checkpoint-interval-s", "3600"]  # no background writes
    with cluster:
        ids = {}
        with LedgerClient(cluster.metadata_uri, **cluster.client_tls) as client:
            for name in ("kept", "doomed"):
                w = client.create_ledger(1, 1, 1, password=PASSWORD)
                for i in range(5):
                    w.add_entry(b"acknowledged %d" % i)
                w.close()
                ids[name] = w.ledger_id
        yield cluster, certs, ids


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_a_certificate_whose_name_embeds_the_operators_gets_no_operator_rights(
        closed_ledgers: Ledgers, kind: str) -> None:
    cluster, certs, ids = closed_ledgers
    ref = _ref(ids["kept"])
    name, sans = HOSTILE[kind]
    pair = certs.authority.issue(name, server=False, client_names=sans)
    before = disk_snapshot(cluster)
    channel, stub = _stub(cluster, certs, pair)
    try:
        key = _outcome(lambda: stub.LedgerKey(pb.LedgerKeyRequest(ledger=ref), timeout=TIMEOUT_S, wait_for_ready=True))
        delete = _outcome(lambda: stub.DeleteLedger(pb.DeleteLedgerRequest(ledger=ref), timeout=TIMEOUT_S, wait_for_ready=True))
        stats = _outcome(lambda: stub.StorageStats(pb.StorageStatsRequest(), timeout=TIMEOUT_S, wait_for_ready=True))
    finally:
        channel.close()
    assert key.startswith("PERMISSION_DENIED LedgerKey refused for ledger"), (kind, key)
    assert delete.startswith("PERMISSION_DENIED DeleteLedger refused for ledger"), (kind, delete)
    assert stats.startswith("PERMISSION_DENIED StorageStats refused"), (kind, stats)
    assert disk_snapshot(cluster) == before, f"{kind}: bytes changed on disk"
    with LedgerClient(cluster.metadata_uri, **cluster.client_tls) as client:  # the ledger is whole
        r = client.open_ledger(ids["kept"], password=PASSWORD)
        assert [e.payload for e in r.read_entries(0, 4)] == [b"acknowledged %d" % i for i in range(5)]


def test_the_real_operator_certificate_still_fetches_the_key_and_deletes(
        closed_ledgers: Ledgers) -> None:
    cluster, certs, ids = closed_ledgers
    ref, doomed = _ref(ids["kept"]), _ref(ids["doomed"])
    one_of_two = certs.authority.issue("operator-among-others", server=False, client_names=("mallory", OPERATOR_NAME))
    for pair in (one_of_two, certs.operator):
        channel, stub = _stub(cluster, certs, pair)
        try:
            assert stub.LedgerKey(pb.LedgerKeyRequest(ledger=ref), timeout=TIMEOUT_S, wait_for_ready=True).master_key \
                == master_key(PASSWORD.encode())
        finally:
            channel.close()
    before = disk_snapshot(cluster)
    channel, stub = _stub(cluster, certs, certs.operator)
    try:
        deleted = stub.DeleteLedger(pb.DeleteLedgerRequest(ledger=doomed), timeout=TIMEOUT_S, wait_for_ready=True)
        assert deleted.status == Status.OK
        gone = stub.ReadLac(pb.ReadLacRequest(ledger=doomed), timeout=TIMEOUT_S, wait_for_ready=True)
        assert gone.status == Status.NO_SUCH_LEDGER
    finally:
        channel.close()
    assert disk_snapshot(cluster) != before  # the delete is journaled
