"""TLS and mutual TLS on real bookie processes (docs/security.md): a mutual-TLS cluster creates,
adds, reads and recovers; clients without an acceptable certificate (none, another CA's, an
expired one) and plaintext clients are refused by both transports with a message that names the
problem, and not one byte changes on the bookies' disks."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from urllib.parse import urlencode

import pytest

from bookie.status import Status
from pyspark_ledger import LedgerClient
from pyspark_ledger.errors import BookieUnavailableError, PySparkLedgerError
from pyspark_ledger.protocol.digest import master_key
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.transport.bookie_client import BookieClient
from pyspark_ledger.transport.tls import TlsSettings
from tests.security.tls_helpers import add_addresses, disk_snapshot

PAYLOAD = bytes(range(256)) * 4  # 1 KiB


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(3, work_dir=tmp_path_factory.mktemp("mtls"), tls_client_auth=True) as c:
        yield c


def test_a_mutual_tls_cluster_creates_adds_reads_and_recovers(cluster: LocalCluster) -> None:
    with LedgerClient(cluster.metadata_uri, **cluster.client_tls) as client:
        w = client.create_ledger(3, 3, 2)
        for i in range(50):
            w.add_entry(PAYLOAD + i.to_bytes(4, "big"))
        w.close()
        r = client.open_ledger(w.ledger_id)
        assert [e.payload for e in r.read_entries(0, 49)] == [PAYLOAD + i.to_bytes(4, "big") for i in range(50)]
        crashed = client.create_ledger(3, 3, 2)  # a writer that never closes: recovery seals it
        for i in range(20):
            crashed.add_entry(b"open %d" % i)
    # The settings as metadata URI query parameters, from another client.
    uri = cluster.metadata_uri + "?" + urlencode(cluster.client_tls)
    with LedgerClient(uri) as other:
        recovered = other.open_ledger(crashed.ledger_id, recovery=True)
        assert recovered.last_add_confirmed() == 19
        assert [e.payload for e in recovered.read_entries(0, 19)] == [b"open %d" % i for i in range(20)]
    # The adds went over the TLS add listener, which saw the client certificate's identity.
    logs = "".join(b.log_path.read_text(errors="replace") for b in cluster.bookies)
    assert "identity=ledger-client" in logs


def _refused_settings(cluster: LocalCluster, kind: str) -> TlsSettings | None:
    certs = cluster.certs
    assert certs is not None
    return {
        "no certificate": TlsSettings.from_values(certs.ca),
        "another CA": TlsSettings.from_values(certs.ca, certs.other_ca_client.cert, certs.other_ca_client.key),
        "expired": TlsSettings.from_values(certs.ca, certs.expired_client.cert, certs.expired_client.key),
        "plaintext": None,
    }[kind]


# What the add transport's error says (the TLS alert the bookie sent, in words), and gRPC's.
ADD_WORDS = {
    "no certificate": ["requires a client certificate", "tls_cert"],
    "another CA": ["does not trust our client certificate", "another CA"],
    "expired": ["client certificate", "expired"],
    "plaintext": ["require TLS", "tls_ca"],
}
GRPC_WORDS = {
    "no certificate": ["UNAVAILABLE", "client certificate", "tls_cert"],
    "another CA": ["UNAVAILABLE", "client certificate", "another CA", "expired"],
    "expired": ["UNAVAILABLE", "client certificate", "expired"],
    "plaintext": ["UNAVAILABLE", "require TLS", "tls_ca"],
}


@pytest.mark.parametrize("kind", list(ADD_WORDS))
def test_a_client_without_an_accepted_certificate_is_refused_and_nothing_changes_on_disk(
        cluster: LocalCluster, kind: str) -> None:
    with LedgerClient(cluster.metadata_uri, **cluster.client_tls) as good:
        w = good.create_ledger(3, 3, 2)
        w.add_entry(b"before")
        w.close()
    before = disk_snapshot(cluster)
    tls = _refused_settings(cluster, kind)
    bookie = cluster.bookies[0]
    with BookieClient(bookie.bookie_id, bookie.address, add_address=add_addresses(cluster)[bookie.bookie_id],
                      tls=tls, rpc_timeout_s=5.0) as client:
        with pytest.raises(BookieUnavailableError) as refused:
            client.delete_ledger((w.ledger_id.scope_id, w.ledger_id.id))  # needs no key today: only TLS stands in the way
        for word in GRPC_WORDS[kind]:
            assert word in str(refused.value)
        with pytest.raises(BookieUnavailableError) as refused:
            client.add_batch((w.ledger_id.scope_id, w.ledger_id.id), b"", [(1, 0, b"intruder")], lambda s, m: None)
        for word in ADD_WORDS[kind]:
            assert word in str(refused.value)
    # And through the public API: every bookie refuses, so the add fails.
    uri_tls = {} if tls is None else {"tls_ca": tls.ca, "tls_cert": tls.cert, "tls_key": tls.key}
    with LedgerClient(cluster.metadata_uri, add_timeout_s=5.0, rpc_timeout_s=5.0, **uri_tls) as bad:
        with pytest.raises(PySparkLedgerError):  # whichever step fails first says why
            bad.create_ledger(3, 3, 2).add_entry(b"intruder", timeout_s=10.0)
    assert disk_snapshot(cluster) == before
    with LedgerClient(cluster.metadata_uri, **cluster.client_tls) as good:
        assert [e.payload for e in good.open_ledger(w.ledger_id).read_entries(0, 0)] == [b"before"]


def test_a_client_with_the_right_certificate_gets_adds_acknowledged_on_the_add_listener(
        cluster: LocalCluster) -> None:
    """The positive twin of the refusals above, on the same raw transport."""
    bookie = cluster.bookies[1]
    with LedgerClient(cluster.metadata_uri, **cluster.client_tls) as good:
        w = good.create_ledger(3, 3, 3)
        w.add_entry(b"0")
    done = threading.Event()
    answers: list[Status] = []
    with BookieClient(bookie.bookie_id, bookie.address, add_address=add_addresses(cluster)[bookie.bookie_id],
                      tls=TlsSettings.from_values(**cluster.client_tls)) as client:
        client.add_batch((w.ledger_id.scope_id, w.ledger_id.id), master_key(b""),
                         [(1, 0, b"1")], lambda s, m: (answers.append(s), done.set()))
        assert done.wait(10.0)
    assert answers == [Status.OK]
