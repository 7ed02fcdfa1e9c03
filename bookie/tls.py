"""The bookie's TLS (docs/security.md): credentials for gRPC, an SSL context for the add
listener, and the verified client identity for authorization.

With --tls-client-auth (mutual TLS) a client must present a certificate signed by --tls-ca;
its identity is then available to the service:
- gRPC handlers: `grpc_peer_identity(context)` (from context.auth_context(): the certificate's
  subject alternative names, else its common name);
- the add listener: `AddListener.peer_identities()` (per connection, from getpeercert()), and
  every connection's log lines name it.
Nothing authorizes by identity yet (issue 21, item 2).
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import grpc

from bookie.errors import BookieError


class TlsSetupError(BookieError, ValueError):
    pass


def _read(path: str, flag: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise TlsSetupError(f"{flag} {path}: {exc.strerror}") from None


def grpc_server_credentials(cert: str, key: str, ca: str | None, client_auth: bool) -> grpc.ServerCredentials:
    return grpc.ssl_server_credentials(
        [(_read(key, "--tls-key"), _read(cert, "--tls-cert"))],
        root_certificates=_read(ca, "--tls-ca") if ca else None,
        require_client_auth=client_auth,
    )


def server_ssl_context(cert: str, key: str, ca: str | None, client_auth: bool) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert, key)
        if ca:
            ctx.load_verify_locations(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise TlsSetupError(f"cannot load --tls-cert {cert} / --tls-key {key} / --tls-ca {ca}: {exc}") from None
    # Mutual TLS: a client without a certificate signed by --tls-ca (or with an expired one) is
    # refused during the handshake.
    ctx.verify_mode = ssl.CERT_REQUIRED if client_auth else ssl.CERT_NONE
    return ctx


def cert_identity(cert: dict[str, Any] | None) -> str:
    """A verified peer certificate's identity (getpeercert()): its SANs, else its subject CN;
    "" for no certificate."""
    if not cert:
        return ""
    sans = [value for kind, value in cert.get("subjectAltName", ()) if kind in ("DNS", "URI", "email")]
    if sans:
        return ",".join(sans)
    for rdn in cert.get("subject", ()):
        for name, value in rdn:
            if name == "commonName":
                return str(value)
    return ""


def grpc_peer_identity(context: grpc.ServicerContext) -> str:
    """The verified client certificate's identity of a gRPC call ("" without mutual TLS)."""
    auth = context.auth_context()
    for key in ("x509_subject_alternative_name", "x509_common_name"):
        values = auth.get(key)
        if values:
            return ",".join(v.decode() for v in values)
    return ""
