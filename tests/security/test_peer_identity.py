"""The verified client identity that authorization will use (bookie.tls): a gRPC handler sees
the client certificate's identity through grpc_peer_identity(context), and the add listener
per connection (peer_identities); a client without mutual TLS has none."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc

from bookie.tls import cert_identity, grpc_peer_identity, grpc_server_credentials
from pyspark_ledger.testing.certs import make_test_certificates
from pyspark_ledger.transport.tls import TlsSettings


def _whoami(_request: bytes, context: grpc.ServicerContext) -> bytes:
    return grpc_peer_identity(context).encode()


def test_a_grpc_handler_sees_the_client_certificates_identity(tmp_path: Path) -> None:
    certs = make_test_certificates(tmp_path)
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        "test.Identity", {"WhoAmI": grpc.unary_unary_rpc_method_handler(_whoami)})])
    port = server.add_secure_port("127.0.0.1:0", grpc_server_credentials(
        str(certs.bookie.cert), str(certs.bookie.key), str(certs.ca), True))
    server.start()
    try:
        settings = TlsSettings.from_values(certs.ca, certs.client.cert, certs.client.key)
        assert settings is not None
        with grpc.secure_channel(f"127.0.0.1:{port}", settings.channel_credentials()) as channel:
            assert channel.unary_unary("/test.Identity/WhoAmI")(b"", timeout=10.0) == b"ledger-client"
    finally:
        server.stop(None)


def test_cert_identity_prefers_names_to_the_common_name() -> None:
    assert cert_identity({"subject": ((("commonName", "cn-only"),),)}) == "cn-only"
    assert cert_identity({"subject": ((("commonName", "cn"),),),
                          "subjectAltName": (("DNS", "svc-a"), ("IP Address", "10.0.0.1"))}) == "svc-a"
    assert cert_identity(None) == ""
