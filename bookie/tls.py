"""The bookie's TLS (docs/security.md): credentials for gRPC, an SSL context for the add
listener, and the verified client identity for authorization.

With --tls-client-auth (mutual TLS) a client must present a certificate signed by --tls-ca;
its identity is then available to the service:
- gRPC handlers: `grpc_peer_identities(context)` (from context.auth_context(): each of the
  certificate's subject alternative names, else its common name, as a value of its own);
- the add listener: `AddListener.peer_identities()` (per connection, from getpeercert()), and
  every connection's log lines name it.
bookie/auth.py authorizes operators by these values, each compared whole with a configured name
(issue 31, item 1): the values are never joined into one string and split again, and a value
that fails identity_problem() (separators, wildcards, control characters, empty, too long) never
matches.

Certificates are reloaded without a restart: both listeners look at the --tls-cert, --tls-key and
--tls-ca files before each new connection's handshake, and when one changed (replaced, rewritten)
they use the new files for that connection and the following ones. Open connections keep the
certificate they were made with. Files that do not load (half written, a key not matching the
certificate) leave the previous certificate in use, with a warning, until they change again.
"""

from __future__ import annotations

import _ssl
import functools
import logging
import os
import re
import ssl
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from bookie.errors import BookieError

log = logging.getLogger(__name__)


class TlsSetupError(BookieError, ValueError):
    pass


class _CertFiles:
    """A listener's certificate, key and CA files, and whether they changed since last looked at
    (inode, size and modification time: a file replaced by rename or rewritten in place)."""

    def __init__(self, *paths: str | None):
        self._paths = [p for p in paths if p]
        self._lock = threading.Lock()
        self._seen = self._signature()

    def _signature(self) -> tuple[tuple[int, int, int] | None, ...]:
        def one(path: str) -> tuple[int, int, int] | None:
            try:
                st = os.stat(path)
            except OSError:
                return None  # missing for a moment while being replaced: the next look sees it
            return st.st_ino, st.st_size, st.st_mtime_ns

        return tuple(one(p) for p in self._paths)

    def changed(self) -> bool:
        """True once per change (concurrent handshakes ask at the same time)."""
        signature = self._signature()
        with self._lock:
            if signature == self._seen:
                return False
            self._seen = signature
            return True


def _read(path: str, flag: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise TlsSetupError(f"{flag} {path}: {exc.strerror}") from None


def _grpc_configuration(cert: str, key: str, ca: str | None, client_auth: bool) -> Any:
    """gRPC's certificate configuration from the files, checked as the add listener loads them
    (gRPC itself would only fail later, at each handshake, on a key that does not match)."""
    key_pem, cert_pem, ca_pem = _read(key, "--tls-key"), _read(cert, "--tls-cert"), _read(ca, "--tls-ca") if ca else None
    _configure(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), cert, key, ca, client_auth)
    return grpc.ssl_server_certificate_configuration([(key_pem, cert_pem)], root_certificates=ca_pem)


def grpc_server_credentials(cert: str, key: str, ca: str | None, client_auth: bool) -> grpc.ServerCredentials:
    """Credentials that gRPC asks, before every new connection's handshake, whether the files changed."""
    files = _CertFiles(cert, key, ca)

    def fetch_if_changed() -> Any:
        if not files.changed():
            return None  # None: keep the current certificate
        try:
            configuration = _grpc_configuration(cert, key, ca, client_auth)
        except TlsSetupError as exc:
            log.warning("TLS files changed but do not load; keeping the previous certificate listener=grpc error=%s", exc)
            return None
        log.info("TLS certificate reloaded listener=grpc cert=%s", cert)
        return configuration

    return grpc.dynamic_ssl_server_credentials(
        _grpc_configuration(cert, key, ca, client_auth), fetch_if_changed, require_client_authentication=client_auth
    )


class ReloadingSSLContext(ssl.SSLContext):
    """The add listener's server context: wrap_socket() uses a context loaded from the files as
    they were at its last change (a fresh one per change, so a failed load never leaves a context
    half replaced). Configured like that context itself, for whoever inspects it."""

    def __new__(cls, cert: str, key: str, ca: str | None, client_auth: bool) -> ReloadingSSLContext:
        return super().__new__(cls, ssl.PROTOCOL_TLS_SERVER)

    def __init__(self, cert: str, key: str, ca: str | None, client_auth: bool):
        self._settings = (cert, key, ca, client_auth)
        self._files = _CertFiles(cert, key, ca)
        self._current = _configure(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), *self._settings)
        _configure(self, *self._settings)

    def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        if self._files.changed():
            try:
                self._current = _configure(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), *self._settings)
                log.info("TLS certificate reloaded listener=add cert=%s", self._settings[0])
            except TlsSetupError as exc:
                log.warning("TLS files changed but do not load; keeping the previous certificate listener=add error=%s", exc)
        return self._current.wrap_socket(*args, **kwargs)


def server_ssl_context(cert: str, key: str, ca: str | None, client_auth: bool) -> ssl.SSLContext:
    """The add listener's context, reloading the files when they change (ReloadingSSLContext)."""
    return ReloadingSSLContext(cert, key, ca, client_auth)


def _configure(ctx: ssl.SSLContext, cert: str, key: str, ca: str | None, client_auth: bool) -> ssl.SSLContext:
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


# A certificate identity that may name an operator: letters, digits and the punctuation of DNS
# names, URIs and e-mail addresses, starting with a letter or digit. No separator (",", ";",
# whitespace), wildcard ("*", "?"), quote, control character or empty value, at most
# IDENTITY_CHARS_MAX characters: such a value is compared whole and never as a list or pattern.
IDENTITY_CHARS_MAX = 253
_IDENTITY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:/+-]*")


def identity_problem(name: str) -> str | None:
    """Why `name` can never be an operator identity (None: it can). Used for the configured names
    (refused at start) and for the presented ones (never matched)."""
    if not name:
        return "an empty name"
    if len(name) > IDENTITY_CHARS_MAX:
        return f"longer than {IDENTITY_CHARS_MAX} characters"
    if _IDENTITY.fullmatch(name) is None:
        return ("a character other than letters, digits and . _ @ : / + - (or not starting with a letter "
                "or digit): separators, wildcards, spaces and control characters never name an operator")
    return None


def cert_identities(cert: dict[str, Any] | None) -> tuple[str, ...]:
    """A verified peer certificate's identities (getpeercert()): each DNS, URI and e-mail SAN as
    its own value, else the subject's common names; () for no certificate. Values are never
    joined: an identity matches one of them whole (a SAN "mallory,ops" is not "ops")."""
    if not cert:
        return ()
    sans = tuple(str(value) for kind, value in cert.get("subjectAltName", ()) if kind in ("DNS", "URI", "email"))
    if sans:
        return sans
    return tuple(str(value) for rdn in cert.get("subject", ()) for name, value in rdn if name == "commonName")


def display_identities(identities: tuple[str, ...]) -> str:
    """For logs and listings only, never for a decision: one plain name as is, else each value
    quoted and escaped (a newline or comma in a name cannot forge a log line or a second name)."""
    if len(identities) == 1 and identity_problem(identities[0]) is None:
        return identities[0]
    return " ".join(ascii(value) for value in identities)


def cert_identity(cert: dict[str, Any] | None) -> str:
    """The identities of cert_identities() as one display string (logs, peer listings); ""
    for no certificate. Authorization uses the tuple, never this string."""
    return display_identities(cert_identities(cert))


# The stdlib's certificate decoder (the one behind SSLSocket.getpeercert(), exposed for its own
# tests): it keeps a name's bytes whole. gRPC's auth context does not: it cuts a SAN at a NUL
# byte, so a certificate for "ledger-operator\x00x" would show as "ledger-operator".
_DECODE_CERT_FILE: Callable[[str], dict[str, Any]] | None = getattr(_ssl, "_test_decode_cert", None)
DECODED_CERTS_MAX = 256  # distinct client certificates whose names are kept decoded


def can_decode_peer_certificates() -> bool:
    """Whether grpc_peer_identities() can read names exactly (else it reports none: fail closed)."""
    return _DECODE_CERT_FILE is not None


@functools.lru_cache(maxsize=DECODED_CERTS_MAX)
def _pem_identities(pem: bytes) -> tuple[str, ...]:
    if _DECODE_CERT_FILE is None:
        return ()
    with tempfile.NamedTemporaryFile(prefix="peer-cert-", suffix=".pem") as f:  # a public certificate
        f.write(pem)
        f.flush()
        try:
            return cert_identities(_DECODE_CERT_FILE(f.name))
        except (ssl.SSLError, ValueError) as exc:
            log.warning("cannot decode a verified client certificate; it names no one error=%s", exc)
            return ()


def grpc_peer_identities(context: grpc.ServicerContext) -> tuple[str, ...]:
    """The verified client certificate's identities of a gRPC call as cert_identities() gives them
    (each SAN, else each common name, a value of its own), decoded from the certificate itself
    rather than from gRPC's name fields (which cut a name at a NUL byte); () without mutual TLS."""
    pems = context.auth_context().get("x509_pem_cert")
    return _pem_identities(bytes(pems[0])) if pems else ()


def grpc_peer_identity(context: grpc.ServicerContext) -> str:
    """grpc_peer_identities() as one display string (display_identities); "" without mutual TLS."""
    return display_identities(grpc_peer_identities(context))
