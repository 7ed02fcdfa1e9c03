"""Metadata service URIs and open_store(), which picks the implementation from the scheme.

    zk://host:port[,host:port...]/root/path[?session_timeout_ms=N&connect_timeout_ms=N&op_timeout_ms=N]
    sqlite:///absolute/path/to/metadata.db[?ttl_ms=N&poll_ms=N]

op_timeout_ms is the deadline of every ZooKeeper call (default: the session timeout, 10 s).

Either may also carry the client's bookie TLS settings, tls_ca=, tls_cert=, tls_key= (file
paths, docs/security.md): tls_params() returns them, and the store ignores them.

ZooKeeper credentials: zk_auth=digest:user:secret or zk_auth=sasl:user:secret (SASL DIGEST-MD5,
for a ZooKeeper with a JAAS Server section of DigestLoginModule users), else the LEDGER_ZK_AUTH
environment variable; every node the store creates then gets a digest or sasl ACL for that user
only (metadata.zk_acl). A URI that carries them is shown through redact_uri() wherever it is
printed or logged, and error messages about a URI never include them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlencode, urlsplit

from metadata.errors import InvalidUriError
from metadata.store import MetadataStore

_HOST_RE = re.compile(r"(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.\-]+):([0-9]{1,5})")
DEFAULT_ZK_ROOT = "/ledgers"
_ZK_PARAMS = {"session_timeout_ms", "connect_timeout_ms", "op_timeout_ms"}
_SQLITE_PARAMS = {"ttl_ms", "poll_ms"}
TLS_PARAMS = ("tls_ca", "tls_cert", "tls_key")  # for the bookie connections, not the store
ZK_AUTH_PARAM = "zk_auth"
ZK_AUTH_ENV = "LEDGER_ZK_AUTH"
ZK_AUTH_SCHEMES = ("digest", "sasl")
_STRING_PARAMS = (*TLS_PARAMS, ZK_AUTH_PARAM)
_REDACTED = "***"


def _split_tls(uri: str) -> tuple[str, dict[str, str]]:
    """The URI without its string query parameters (TLS, zk_auth), and those parameters."""
    base, sep, query = uri.partition("?")
    if not sep:
        return uri, {}
    pairs = parse_qsl(query, keep_blank_values=True)
    found = {k: v for k, v in pairs if k in _STRING_PARAMS}
    if not found:
        return uri, {}
    rest = [(k, v) for k, v in pairs if k not in _STRING_PARAMS]
    return (base + "?" + urlencode(rest)) if rest else base, found


def tls_params(uri: str) -> dict[str, str]:
    """The tls_ca / tls_cert / tls_key query parameters of a metadata URI (absent ones left out)."""
    found = _split_tls(uri.strip())[1] if isinstance(uri, str) else {}
    return {k: v for k, v in found.items() if k in TLS_PARAMS}


def zk_auth(uri: str, environ: dict[str, str] | None = None) -> tuple[str, str] | None:
    """The ZooKeeper credentials as (scheme, "user:secret"): the URI's zk_auth, else LEDGER_ZK_AUTH,
    else None. A malformed value is refused without echoing it."""
    raw = (_split_tls(uri.strip())[1] if isinstance(uri, str) else {}).get(ZK_AUTH_PARAM)
    if raw is None:
        raw = (os.environ if environ is None else environ).get(ZK_AUTH_ENV) or None
    if raw is None:
        return None
    scheme, _, credential = raw.partition(":")
    user, _, secret = credential.partition(":")
    if scheme not in ZK_AUTH_SCHEMES or not user or not secret:
        raise InvalidUriError("zk_auth must be digest:user:secret or sasl:user:secret")
    return scheme, credential


def split_zk_auth(uri: str) -> tuple[str, str | None]:
    """`uri` without its zk_auth parameter (a plain str), and that parameter's value (None when it
    has none). A process started with the URI gets the first on its command line and the second
    in its environment (ZK_AUTH_ENV): a command line is readable by every local user."""
    plain = uri[:]
    base, found = _split_tls(plain.strip())
    auth = found.pop(ZK_AUTH_PARAM, None)
    if auth is None:
        return plain, None
    return (base + ("&" if "?" in base else "?") + urlencode(found)) if found else base, auth


def with_client_params(uri: str, params: dict[str, str]) -> str:
    """`uri` with these tls_* / zk_auth parameters set (replacing the URI's own); a URI then
    carrying zk_auth comes back as a RedactedUri."""
    if not params:
        return uri
    unknown = sorted(set(params) - set(_STRING_PARAMS))
    if unknown:
        raise InvalidUriError(f"not a client parameter of the metadata URI: {', '.join(unknown)}")
    base, found = _split_tls(uri.strip())
    found.update(params)
    joiner = "&" if "?" in base else "?"
    full = base + joiner + urlencode(found)
    return RedactedUri(full) if ZK_AUTH_PARAM in found else full


def printable(uri: str) -> str:
    """`uri` itself, as a RedactedUri when it carries zk_auth (so printing it hides them)."""
    if isinstance(uri, str) and ZK_AUTH_PARAM in _split_tls(uri.strip())[1]:
        return RedactedUri(uri)
    return uri


def with_zk_auth(uri: str, auth: str | None) -> str:
    """`uri` with zk_auth=auth added (replacing one it had); unchanged when auth is None."""
    return with_client_params(uri, {ZK_AUTH_PARAM: auth}) if auth else uri


class RedactedUri(str):
    """A metadata URI that carries zk_auth and hides it wherever it is printed: str(), repr() and
    f-strings show redact_uri's form, while its value (what parse_uri, open_store and pickling
    read) is the whole URI. For option objects that are passed around and put in messages
    (pyspark_ledger.datasource.options)."""

    __slots__ = ()

    def __str__(self) -> str:
        return redact_uri(self[:])

    def __repr__(self) -> str:
        return repr(redact_uri(self[:]))

    def __format__(self, spec: str) -> str:
        return format(redact_uri(self[:]), spec)


def redact_uri(uri: str) -> str:
    """The URI as it may be printed or logged: a zk_auth value replaced by ***."""
    if not isinstance(uri, str) or ZK_AUTH_PARAM not in uri:
        return uri
    base, sep, query = uri.partition("?")
    pairs = [(k, _REDACTED if k == ZK_AUTH_PARAM else v) for k, v in parse_qsl(query, keep_blank_values=True)]
    return base + sep + urlencode(pairs, safe="*:/")


@dataclass(frozen=True)
class StoreUri:
    scheme: str  # "zk" or "sqlite"
    hosts: str = ""  # zk only: "h1:p1,h2:p2"
    path: str = ""  # zk: root znode; sqlite: database file
    params: dict[str, int] = field(default_factory=dict)


def _int_params(uri: str, query: str, allowed: set[str]) -> dict[str, int]:
    params: dict[str, int] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key not in allowed:
            raise InvalidUriError(f"unknown parameter {key!r} in metadata URI {uri!r} (known: {', '.join(sorted(allowed))})")
        if not (value.isascii() and value.isdigit()) or int(value) <= 0:
            raise InvalidUriError(f"parameter {key!r} in metadata URI {uri!r} must be a positive integer, got {value!r}")
        params[key] = int(value)
    return params


def parse_uri(uri: str) -> StoreUri:
    if not isinstance(uri, str) or not uri.strip():
        raise InvalidUriError("empty metadata service URI")
    uri = _split_tls(uri.strip())[0]
    if "://" not in uri:
        raise InvalidUriError(
            f"malformed metadata URI {uri!r}: expected zk://host:port/root or sqlite:///absolute/path.db"
        )
    scheme, rest = uri.split("://", 1)
    scheme = scheme.lower()
    if scheme == "zk":
        netloc, _, tail = rest.partition("/")
        path_part, _, query = ("/" + tail).partition("?") if tail else ("", "", "")
        if "?" in netloc:
            netloc, _, query = netloc.partition("?")
        if not netloc:
            raise InvalidUriError(f"malformed ZooKeeper URI {uri!r}: no host:port given")
        hosts = netloc.split(",")
        for h in hosts:
            m = _HOST_RE.fullmatch(h)
            if not m or not 0 < int(m.group(2)) < 65536:
                raise InvalidUriError(f"malformed ZooKeeper URI {uri!r}: bad host:port {h!r}")
        root = path_part.rstrip("/") or DEFAULT_ZK_ROOT
        if "//" in root or any(p in (".", "..") for p in root.split("/")):
            raise InvalidUriError(f"malformed ZooKeeper URI {uri!r}: bad root path {root!r}")
        return StoreUri("zk", ",".join(hosts), root, _int_params(uri, query, _ZK_PARAMS))
    if scheme == "sqlite":
        parts = urlsplit(uri)
        if parts.netloc:
            raise InvalidUriError(
                f"malformed sqlite URI {uri!r}: use three slashes and an absolute path, e.g. sqlite:///var/lib/ledger/meta.db"
            )
        if not parts.path.startswith("/") or parts.path.endswith("/"):
            raise InvalidUriError(f"malformed sqlite URI {uri!r}: the database path must be an absolute file path")
        return StoreUri("sqlite", "", parts.path, _int_params(uri, parts.query, _SQLITE_PARAMS))
    raise InvalidUriError(f"unknown metadata URI scheme {scheme!r} in {uri!r} (supported: zk, sqlite)")


def open_store(uri: str, *, timeout_s: float | None = None) -> MetadataStore:
    """Open the metadata store a URI names. Connection problems raise MetadataUnavailableError.

    `timeout_s` (for example LedgerClient's metadata_timeout_s) overrides the URI's op_timeout_ms:
    the deadline of every metadata call, which defaults to the session timeout."""
    parsed = parse_uri(uri)
    if parsed.scheme == "zk":
        from metadata.zookeeper_store import ZooKeeperStore

        p = parsed.params
        session_timeout_s = p.get("session_timeout_ms", 10_000) / 1000
        op_timeout_s = timeout_s if timeout_s is not None else p.get("op_timeout_ms", 0) / 1000 or session_timeout_s
        return ZooKeeperStore(
            parsed.hosts,
            parsed.path,
            session_timeout_s=session_timeout_s,
            connect_timeout_s=p.get("connect_timeout_ms", 10_000) / 1000,
            op_timeout_s=op_timeout_s,
            uri=redact_uri(uri),
            auth=zk_auth(uri),
        )
    from metadata.embedded_store import DEFAULT_POLL_MS, DEFAULT_TTL_MS, EmbeddedStore

    return EmbeddedStore(
        parsed.path,
        ttl_ms=parsed.params.get("ttl_ms", DEFAULT_TTL_MS),
        poll_ms=parsed.params.get("poll_ms", DEFAULT_POLL_MS),
        uri=redact_uri(uri),
    )
