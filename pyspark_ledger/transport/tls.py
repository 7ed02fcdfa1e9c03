"""Client-side TLS settings for the bookie connections (docs/security.md).

One TlsSettings gives both transports their encryption: gRPC channel credentials for the unary
calls and the gRPC Add stream, and an ssl.SSLContext for the plain-TCP add listener. The bookie's
certificate must be signed by `ca` and name the host the bookie registered (host:port), as
hostname checking is on. `cert` and `key` are this client's own certificate, for bookies that
require one (mutual TLS, the bookie's --tls-client-auth).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import grpc

from pyspark_ledger.errors import PySparkLedgerError

TLS_SETTING_NAMES = ("tls_ca", "tls_cert", "tls_key")


class TlsConfigError(PySparkLedgerError, ValueError):
    """The TLS settings are incomplete or their files unreadable (said before any connection)."""


def _read(path: Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise TlsConfigError(f"cannot read the {what} {path}: {exc.strerror}") from None


@dataclass(frozen=True)
class TlsSettings:
    ca: Path
    cert: Path | None = None
    key: Path | None = None

    @classmethod
    def from_values(cls, tls_ca: str | Path | None, tls_cert: str | Path | None = None,
                    tls_key: str | Path | None = None) -> TlsSettings | None:
        """None when no TLS is asked for; TlsConfigError for a half-given setting."""
        if not (tls_ca or tls_cert or tls_key):
            return None
        if not tls_ca:
            raise TlsConfigError("tls_cert/tls_key given without tls_ca (the CA that signed the bookies' certificates)")
        if bool(tls_cert) != bool(tls_key):
            raise TlsConfigError("tls_cert and tls_key go together (the client certificate and its private key)")
        settings = cls(Path(tls_ca), Path(tls_cert) if tls_cert else None, Path(tls_key) if tls_key else None)
        settings.ssl_context()  # unreadable or mismatched files fail here, not at the first add
        return settings

    def channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca, "TLS CA certificate (tls_ca)"),
            private_key=_read(self.key, "TLS client key (tls_key)") if self.key else None,
            certificate_chain=_read(self.cert, "TLS client certificate (tls_cert)") if self.cert else None,
        )

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)  # verifies the chain and the host name
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_verify_locations(cafile=str(self.ca))
            if self.cert is not None:
                ctx.load_cert_chain(str(self.cert), str(self.key))
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(f"cannot load the client TLS files (tls_ca={self.ca}, tls_cert={self.cert}, "
                                 f"tls_key={self.key}): {exc}") from None
        return ctx


def grpc_failure_hint(details: str, tls: TlsSettings | None) -> str:
    """A hint to add to a gRPC connection failure. gRPC reports a bookie that refused the
    handshake only as 'Socket closed' (TLS 1.3 alerts do not reach the message); the bookie's log
    names the exact reason."""
    if "Socket closed" not in details and "handshake" not in details.lower():
        return ""
    if tls is None:
        return " (does the bookie require TLS? set tls_ca, and tls_cert/tls_key for mutual TLS)"
    if "CERTIFICATE_VERIFY_FAILED" in details:
        return " (the bookie's certificate is not signed by tls_ca, has expired, or does not name its host)"
    if tls.cert is None:
        return " (TLS handshake refused: the bookie may require a client certificate: set tls_cert and tls_key)"
    return (" (TLS handshake refused: the bookie may not accept our client certificate: signed by another CA, "
            "or expired; the bookie's log says which)")
