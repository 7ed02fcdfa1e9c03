"""Bookie TLS certificates are reloaded without a restart (bookie/tls.py): a real bookie process
with TLS; its certificate and key files are replaced (by rename, one after the other, as a
renewal tool does) with a certificate of another CA; new connections to the gRPC port and to the
add listener then get the new certificate, a client trusting only the new CA can call the bookie,
and the process was never restarted."""

from __future__ import annotations

import os
import re
import socket
import ssl
import time
from pathlib import Path

from pyspark_ledger.testing.certs import CertificateAuthority
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.transport.bookie_client import BookieClient
from pyspark_ledger.transport.tls import TlsSettings

RELOAD_BOUND_S = 10.0  # the next handshake after the change loads the files; a few retries at most


def _served_certificate(port: int, alpn: list[str] | None = None) -> bytes:
    """The certificate a new TLS connection to `port` is given (DER), whoever signed it."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if alpn:
        ctx.set_alpn_protocols(alpn)  # gRPC negotiates HTTP/2
    with socket.create_connection(("127.0.0.1", port), timeout=5.0) as raw, ctx.wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def _replace(source: Path, target: Path) -> None:
    staged = target.with_name(target.name + ".new")
    staged.write_bytes(source.read_bytes())
    staged.chmod(0o600)
    os.replace(staged, target)


def _wait_for_certificate(port: int, expected: bytes, alpn: list[str] | None = None) -> None:
    deadline = time.monotonic() + RELOAD_BOUND_S
    while (served := _served_certificate(port, alpn)) != expected:
        assert time.monotonic() < deadline, f"port {port} still serves the old certificate"
        time.sleep(0.1)
    assert served == expected


def _der(pem_path: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem_path.read_text())


def test_replaced_certificate_files_are_used_by_new_connections_without_a_restart(tmp_path: Path) -> None:
    with LocalCluster(1, tls=True, work_dir=tmp_path / "cluster") as cluster:
        assert cluster.certs is not None
        bookie = cluster.bookies[0]
        assert bookie.proc is not None
        pid = bookie.proc.pid
        found = re.search(r"add_port=(\d+)", bookie.log_path.read_text())
        assert found, bookie.tail_log()
        add_port = int(found.group(1))
        assert _served_certificate(bookie.port, ["h2"]) == _der(cluster.certs.bookie.cert)
        assert _served_certificate(add_port) == _der(cluster.certs.bookie.cert)

        renewed_ca = CertificateAuthority(tmp_path / "renewed-ca", name="renewed CA")
        renewed = renewed_ca.issue("bookie-renewed", client=True)
        _replace(renewed.cert, cluster.certs.bookie.cert)
        time.sleep(0.05)  # a handshake between the two renames sees a key that does not match: kept old
        _replace(renewed.key, cluster.certs.bookie.key)

        _wait_for_certificate(bookie.port, _der(renewed.cert), ["h2"])
        _wait_for_certificate(add_port, _der(renewed.cert))
        client = BookieClient(bookie.bookie_id, bookie.address, rpc_timeout_s=5.0,
                              tls=TlsSettings.from_values(renewed_ca.ca_path))
        try:
            assert client.info(timeout_s=5.0) is not None  # a client trusting only the new CA gets in
        finally:
            client.close()
        assert bookie.proc is not None and bookie.proc.pid == pid and bookie.running
        assert "TLS certificate reloaded listener=grpc" in bookie.log_path.read_text()
        assert "TLS certificate reloaded listener=add" in bookie.log_path.read_text()
