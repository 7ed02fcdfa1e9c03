"""The verified client identity that authorization will use (bookie.tls): a gRPC handler sees
the client certificate's identity through grpc_peer_identity(context), and the add listener
per connection (peer_identities); a client without mutual TLS has none."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from bookie.auth import AuthConfigError, Authorizer, AuthPolicy, AuthRefusals, operator_names
from bookie.metrics import Metrics
from bookie.tls import (
    IDENTITY_CHARS_MAX,
    cert_identities,
    cert_identity,
    grpc_peer_identities,
    grpc_peer_identity,
    grpc_server_credentials,
    identity_problem,
)
from pyspark_ledger.testing.certs import make_test_certificates
from pyspark_ledger.transport.tls import TlsSettings
from tests.security.auth_checks import FakeContext


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


# Issue 31, item 1: each SAN (else each CN) is a value of its own and an operator name matches one
# of them whole. The hostile names a CA might sign for someone who picks their own name:
OPERATOR = "ledger-operator"
HOSTILE = {
    "comma": f"mallory,{OPERATOR}",
    "newline": f"mallory\n{OPERATOR}",
    "NUL": f"{OPERATOR}\x00mallory",  # gRPC's name fields cut this to the operator's name
    "wildcard": "*",
    "prefix wildcard": "ledger-*",
    "space": f"mallory {OPERATOR}",
    "semicolon": f"mallory;{OPERATOR}",
    "empty": "",
    "very long": OPERATOR + "x" * 5000,
}


def test_cert_identities_keeps_each_name_whole() -> None:
    assert cert_identities({"subjectAltName": (("DNS", f"mallory,{OPERATOR}"), ("DNS", "b"), ("IP Address", "1.2.3.4"))}) \
        == (f"mallory,{OPERATOR}", "b")
    assert cert_identities({"subject": ((("commonName", f"mallory,{OPERATOR}"),),)}) == (f"mallory,{OPERATOR}",)
    assert cert_identities(None) == ()
    # The display form never reads as the operator's name.
    assert cert_identity({"subjectAltName": (("DNS", f"mallory,{OPERATOR}"),)}) == ascii(f"mallory,{OPERATOR}")
    assert "\n" not in cert_identity({"subjectAltName": (("DNS", HOSTILE["newline"]),)})


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_a_hostile_name_is_no_identity_and_is_refused_in_the_configuration(kind: str) -> None:
    name = HOSTILE[kind]
    assert identity_problem(name) is not None
    if kind == "comma":  # in --operator-identities a comma separates two names
        assert operator_names(f"{OPERATOR},{name}") == frozenset({OPERATOR, "mallory"})
        return
    with pytest.raises(AuthConfigError, match="--operator-identities: .* is not a certificate identity"):
        operator_names(f"{OPERATOR},{name}" if kind != "empty" else f"{OPERATOR},,other")


def test_plain_names_of_every_kind_are_identities() -> None:
    for name in (OPERATOR, "spiffe://cluster/ns/ops/sa/alice", "ops+alice@example.com", "a" * IDENTITY_CHARS_MAX):
        assert identity_problem(name) is None, name
    assert operator_names(f" {OPERATOR} , ops-bob ") == frozenset({OPERATOR, "ops-bob"})
    assert operator_names(None) == operator_names("") == frozenset()


def _authorizer() -> Authorizer:
    return Authorizer(AuthPolicy(operator_identities=operator_names(OPERATOR)), AuthRefusals(Metrics()))


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_a_certificate_with_a_hostile_name_is_no_operator(kind: str) -> None:
    ctx = FakeContext(identities=(HOSTILE[kind],))
    assert not _authorizer().is_operator(ctx)


def test_the_operators_name_as_one_san_among_others_is_the_operator() -> None:
    authorizer = _authorizer()
    assert authorizer.is_operator(FakeContext(identities=("mallory", OPERATOR)))
    assert authorizer.is_operator(FakeContext(identity=OPERATOR))
    assert not authorizer.is_operator(FakeContext(identities=("mallory", "ledger-operator2")))
    assert not authorizer.is_operator(FakeContext())


def test_the_joined_and_split_rule_this_replaces_would_take_the_comma_certificate_as_the_operator() -> None:
    """The planted bug: the old rule (names joined with "," and split again) is fooled by the
    same certificate, so the hostile case above does test something."""
    identities = grpc_peer_identities(FakeContext(identities=(HOSTILE["comma"],)))
    old_rule = any(name == OPERATOR for name in ",".join(identities).split(","))
    assert old_rule and not _authorizer().is_operator(FakeContext(identities=(HOSTILE["comma"],)))
