"""TLS settings end to end, short of a full cluster: the metadata URI's tls_* parameters, client
and bookie refusals of incomplete settings, --allow-plaintext on the add listener (gRPC stays
TLS-only), and the metrics endpoint bound to 127.0.0.1 unless --metrics-host says otherwise."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from bookie.config import ConfigError, build_parser, config_from_args
from bookie.status import Status
from metadata.uri import parse_metadata_uri, parse_uri
from pyspark_ledger.errors import BookieUnavailableError
from pyspark_ledger.protocol.digest import master_key
from pyspark_ledger.testing.certs import make_test_certificates
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.testing.zookeeper_server import free_port
from pyspark_ledger.transport.bookie_client import BookieClient
from pyspark_ledger.transport.tls import TlsConfigError, TlsSettings
from tests.security.tls_helpers import add_addresses


def test_tls_parameters_of_a_metadata_uri_are_for_the_client_and_ignored_by_the_store() -> None:
    uri = "zk://127.0.0.1:2181/ledgers?op_timeout_ms=500&tls_ca=/etc/ca.pem&tls_cert=/etc/c.pem&tls_key=/etc/c.key"
    assert parse_metadata_uri(uri).tls.as_params() == {"tls_ca": "/etc/ca.pem", "tls_cert": "/etc/c.pem", "tls_key": "/etc/c.key"}
    assert parse_uri(uri) == parse_uri("zk://127.0.0.1:2181/ledgers?op_timeout_ms=500")
    assert parse_metadata_uri("sqlite:///var/m.db?ttl_ms=5").tls.as_params() == {}


def test_incomplete_client_settings_are_refused_before_any_connection(tmp_path: Path) -> None:
    certs = make_test_certificates(tmp_path)
    with pytest.raises(TlsConfigError, match="tls_cert and tls_key go together"):
        TlsSettings.from_values(certs.ca, certs.client.cert)
    with pytest.raises(TlsConfigError, match="without tls_ca"):
        TlsSettings.from_values(None, certs.client.cert, certs.client.key)
    with pytest.raises(TlsConfigError, match="missing.pem"):
        TlsSettings.from_values(tmp_path / "missing.pem")
    assert TlsSettings.from_values(None) is None


def test_incomplete_bookie_settings_are_refused_at_start() -> None:
    parse = build_parser().parse_args
    with pytest.raises(ConfigError, match="--tls-cert and --tls-key go together"):
        config_from_args(parse(["--metadata-uri", "sqlite:///m.db", "--data-dir", "/d", "--tls-cert", "c.pem"]))
    with pytest.raises(ConfigError, match="--tls-client-auth needs"):
        config_from_args(parse(["--metadata-uri", "sqlite:///m.db", "--data-dir", "/d", "--tls-cert", "c.pem",
                                "--tls-key", "k.pem", "--tls-client-auth"]))


def _connects(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=2.0).close()
        return True
    except OSError:
        return False


def test_allow_plaintext_opens_only_the_add_listener_and_metrics_stay_local(tmp_path: Path) -> None:
    metrics_port = free_port()
    with LocalCluster(1, work_dir=tmp_path, tls=True,
                      bookie_args=["--allow-plaintext", "--metrics-port", str(metrics_port),
                                   "--no-verify-ledger-keys"]) as cluster:
        bookie = cluster.bookies[0]
        answers: list[Status] = []
        done = threading.Event()
        with BookieClient(bookie.bookie_id, bookie.address, add_address=add_addresses(cluster)[bookie.bookie_id],
                          rpc_timeout_s=5.0) as plain:
            plain.add_batch((0, 1), master_key(b""), [(0, -1, b"plain")], lambda s, m: (answers.append(s), done.set()))
            assert done.wait(10.0)
            assert answers == [Status.OK]
            with pytest.raises(BookieUnavailableError, match="require TLS"):
                plain.info()
        assert _connects("127.0.0.1", metrics_port)
        assert not _connects("127.0.0.3", metrics_port)  # bound to 127.0.0.1 only


def test_metrics_host_binds_the_metrics_endpoint_elsewhere(tmp_path: Path) -> None:
    metrics_port = free_port()
    with LocalCluster(1, work_dir=tmp_path,
                      bookie_args=["--metrics-port", str(metrics_port), "--metrics-host", "127.0.0.3"]):
        assert _connects("127.0.0.3", metrics_port)
        assert not _connects("127.0.0.1", metrics_port)


def test_the_grpc_add_stream_runs_over_mutual_tls_and_refuses_a_client_without_a_certificate(tmp_path: Path) -> None:
    """A bookie without an add listener (--add-port -1): adds go over gRPC's stream, under the
    same channel credentials."""
    with LocalCluster(1, work_dir=tmp_path, tls_client_auth=True,
                      bookie_args=["--add-port", "-1", "--no-verify-ledger-keys"]) as cluster:
        bookie = cluster.bookies[0]
        certs = cluster.certs
        assert certs is not None
        for tls, expected in ((TlsSettings.from_values(**cluster.client_tls), Status.OK),
                              (TlsSettings.from_values(certs.ca), Status.INTERNAL_ERROR)):
            answers: list[tuple[Status, str]] = []
            done = threading.Event()
            with BookieClient(bookie.bookie_id, bookie.address, tls=tls, rpc_timeout_s=5.0) as client:
                try:
                    client.add_batch((0, 2), master_key(b""), [(0, -1, b"grpc")],
                                     lambda s, m: (answers.append((s, m)), done.set()))
                except BookieUnavailableError as exc:
                    # The refused stream may already be closed when the add is submitted (under
                    # load the handshake fails first): the refusal is then raised, not called back.
                    answers.append((Status.INTERNAL_ERROR, f"UNAVAILABLE (raised) {exc}"))
                    done.set()
                assert done.wait(15.0)
            assert answers[0][0] == expected, answers
            if expected != Status.OK:
                assert "UNAVAILABLE" in answers[0][1]
