"""The metadata URI parsed once into MetadataSettings: the store's address, the ZooKeeper
credentials, the client's TLS files and the store's other parameters.

    zk://host:port[,host:port...]/root/path[?session_timeout_ms=N&connect_timeout_ms=N&op_timeout_ms=N]
    sqlite:///absolute/path/to/metadata.db[?ttl_ms=N&poll_ms=N]

plus, on either, tls_ca= / tls_cert= / tls_key= (file paths: the client's TLS to the bookies,
ignored by the store) and zk_auth=digest:user:secret or zk_auth=sasl:user:secret (ZooKeeper
credentials).

Everything that reads a URI (LedgerClient, open_store, the bookie server, the CLI, the Spark
options) parses it here once and passes the settings down; nothing splits the string again. The
settings are frozen, and their str() and repr() never hold the secret: str() is the URI with
zk_auth=***, which is what logs and error messages show. The whole URI, secret and all, comes
only from uri_with_secrets(): for a child's environment and for pickling (an executor of a Spark
job gets the URI string and parses it, once per process: the parse is cached).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from types import MappingProxyType
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from metadata.errors import InvalidUriError

_HOST_RE = re.compile(r"(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.\-]+):([0-9]{1,5})")
DEFAULT_ZK_ROOT = "/ledgers"
ZK_PARAMS = ("session_timeout_ms", "connect_timeout_ms", "op_timeout_ms")
SQLITE_PARAMS = ("ttl_ms", "poll_ms")
TLS_PARAMS = ("tls_ca", "tls_cert", "tls_key")  # for the bookie connections, not the store
ZK_AUTH_PARAM = "zk_auth"
ZK_AUTH_ENV = "LEDGER_ZK_AUTH"
ZK_AUTH_SCHEMES = ("digest", "sasl")
REDACTED = "***"
PARSE_CACHE_SIZE = 64  # distinct URIs one process parses: a client, a bookie, a test or two


@dataclass(frozen=True)
class StoreUri:
    """Where the metadata store is: what open_store needs, no credentials."""

    scheme: str  # "zk" or "sqlite"
    hosts: str = ""  # zk only: "h1:p1,h2:p2"
    path: str = ""  # zk: root znode; sqlite: database file
    params: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Frozen all the way down: one parse is shared by every caller (the cache).
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))

    def __str__(self) -> str:
        base = f"sqlite://{self.path}" if self.scheme == "sqlite" else f"zk://{self.hosts}{self.path}"
        return base + ("?" + urlencode(sorted(self.params.items())) if self.params else "")


@dataclass(frozen=True)
class ZkAuth:
    """ZooKeeper credentials. repr() and str() show the scheme and user only."""

    scheme: str  # "digest" or "sasl"
    user: str
    secret: str = field(repr=False)

    def __post_init__(self) -> None:
        assert self.scheme in ZK_AUTH_SCHEMES and self.user and self.secret, "ZkAuth built around parse_zk_auth"

    def __str__(self) -> str:
        return f"{self.scheme}:{self.user}:{REDACTED}"

    def as_pair(self) -> tuple[str, str]:
        """(scheme, "user:secret"): what metadata.zk_acl and the ZooKeeper store take."""
        return self.scheme, f"{self.user}:{self.secret}"

    def reveal(self) -> str:
        """"scheme:user:secret", the form of zk_auth= and LEDGER_ZK_AUTH: for a child's environment only."""
        return f"{self.scheme}:{self.user}:{self.secret}"


@dataclass(frozen=True)
class TlsFiles:
    """The client's TLS files for the bookie connections (docs/security.md); None: not given."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None

    def as_params(self) -> dict[str, str]:
        """tls_ca / tls_cert / tls_key of the given ones."""
        values = dict(zip(TLS_PARAMS, (self.ca, self.cert, self.key), strict=True))
        return {k: v for k, v in values.items() if v is not None}


@dataclass(frozen=True)
class MetadataSettings:
    """A parsed metadata URI (parse_metadata_uri). str() and repr() are redacted."""

    store: StoreUri
    zk_auth: ZkAuth | None = None
    tls: TlsFiles = TlsFiles()

    def __post_init__(self) -> None:
        assert self.store.scheme in ("zk", "sqlite"), "MetadataSettings built around parse_metadata_uri"
        assert self.zk_auth is None or isinstance(self.zk_auth, ZkAuth), "credentials are a ZkAuth, never a string"

    @property
    def scheme(self) -> str:
        return self.store.scheme

    def _query(self, secret: str | None) -> list[tuple[str, str]]:
        pairs = [(k, str(v)) for k, v in sorted(self.store.params.items())]
        pairs += sorted(self.tls.as_params().items())
        if self.zk_auth is not None:
            pairs.append((ZK_AUTH_PARAM, secret if secret is not None else self.zk_auth.reveal()))
        return pairs

    def _uri(self, secret: str | None) -> str:
        base = str(replace(self.store, params={}))
        query = self._query(secret)
        return base + ("?" + urlencode(query, safe="*:/") if query else "")

    def __str__(self) -> str:
        return self._uri(REDACTED)

    def __repr__(self) -> str:
        return f"MetadataSettings({str(self)!r})"

    def uri_with_secrets(self) -> str:
        """The whole URI, zk_auth's secret included: for a child's environment (never a command
        line, a log line or a message) and for pickling."""
        return self._uri(None)

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # What travels (to a Spark executor) is the URI string; the receiver parses it once.
        return parse_metadata_uri, (self.uri_with_secrets(),)

    def with_zk_auth(self, auth: ZkAuth | None) -> MetadataSettings:
        return replace(self, zk_auth=auth)

    def with_tls(self, tls: TlsFiles) -> MetadataSettings:
        return replace(self, tls=tls)

    def without_secrets(self) -> MetadataSettings:
        return replace(self, zk_auth=None)

    def resolved_zk_auth(self, environ: dict[str, str] | None = None) -> ZkAuth | None:
        """The credentials: the URI's zk_auth, else LEDGER_ZK_AUTH (from `environ`, default os.environ)."""
        if self.zk_auth is not None:
            return self.zk_auth
        raw = (os.environ if environ is None else environ).get(ZK_AUTH_ENV) or None
        return None if raw is None else parse_zk_auth(raw, ZK_AUTH_ENV)


def parse_zk_auth(raw: str, source: str = ZK_AUTH_PARAM) -> ZkAuth:
    """"digest:user:secret" or "sasl:user:secret"; `source` names where it came from in the error,
    which never echoes the value."""
    scheme, _, credential = raw.partition(":")
    user, _, secret = credential.partition(":")
    if scheme not in ZK_AUTH_SCHEMES or not user or not secret:
        raise InvalidUriError(f"{source} must be digest:user:secret or sasl:user:secret")
    if secret == REDACTED:
        raise InvalidUriError(f"{source} is redacted ({REDACTED}): pass the original URI or its settings, "
                              "not one printed from a log or a message")
    return ZkAuth(scheme, user, secret)


def parse_metadata_uri(uri: str) -> MetadataSettings:
    """Parse a metadata URI or raise InvalidUriError naming the bad part (never echoing a secret).
    Cached: parsing the same URI again costs a dictionary look-up."""
    if not isinstance(uri, str) or not uri.strip():
        raise InvalidUriError("empty metadata service URI")
    return _parse(uri.strip())


@lru_cache(maxsize=PARSE_CACHE_SIZE)
def _parse(uri: str) -> MetadataSettings:
    base, _, query = uri.partition("?")
    if "://" not in base:
        raise InvalidUriError(
            f"malformed metadata URI {base!r}: expected zk://host:port/root or sqlite:///absolute/path.db")
    scheme = base.split("://", 1)[0].lower()
    if scheme not in ("zk", "sqlite"):
        raise InvalidUriError(f"unknown metadata URI scheme {scheme!r} in {base!r} (supported: zk, sqlite)")
    strings, numbers = _split_query(base, query, ZK_PARAMS if scheme == "zk" else SQLITE_PARAMS)
    store = _zk_store(base, numbers) if scheme == "zk" else _sqlite_store(base, numbers)
    auth = strings.get(ZK_AUTH_PARAM)
    tls = TlsFiles(strings.get("tls_ca"), strings.get("tls_cert"), strings.get("tls_key"))
    return MetadataSettings(store, None if auth is None else parse_zk_auth(auth, f"parameter {ZK_AUTH_PARAM!r}"), tls)


def _split_query(base: str, query: str, int_params: tuple[str, ...]) -> tuple[dict[str, str], dict[str, int]]:
    """The string parameters (TLS files, zk_auth) and the store's integer ones, each checked."""
    strings: dict[str, str] = {}
    numbers: dict[str, int] = {}
    known = (*int_params, *TLS_PARAMS, ZK_AUTH_PARAM)
    for key, value in parse_qsl(query, keep_blank_values=True):
        where = f"parameter {key!r} in metadata URI {base!r}"
        if key not in known:
            raise InvalidUriError(f"unknown parameter {key!r} in metadata URI {base!r} (known: {', '.join(sorted(known))})")
        if key in strings or key in numbers:
            raise InvalidUriError(f"{where} is given twice")
        if key in int_params:
            if not (value.isascii() and value.isdigit()) or int(value) <= 0:
                raise InvalidUriError(f"{where} must be a positive integer, got {value!r}")
            numbers[key] = int(value)
        elif not value:
            raise InvalidUriError(f"{where} is empty")
        else:
            strings[key] = value
    return strings, numbers


def _zk_store(uri: str, params: dict[str, int]) -> StoreUri:
    netloc, _, tail = uri.split("://", 1)[1].partition("/")
    if not netloc:
        raise InvalidUriError(f"malformed ZooKeeper URI {uri!r}: no host:port given")
    hosts = netloc.split(",")
    for h in hosts:
        m = _HOST_RE.fullmatch(h)
        if not m or not 0 < int(m.group(2)) < 65536:
            raise InvalidUriError(f"malformed ZooKeeper URI {uri!r}: bad host:port {h!r}")
    root = ("/" + tail).rstrip("/") or DEFAULT_ZK_ROOT
    if "//" in root or any(p in (".", "..") for p in root.split("/")):
        raise InvalidUriError(f"malformed ZooKeeper URI {uri!r}: bad root path {root!r}")
    return StoreUri("zk", ",".join(hosts), root, params)


def _sqlite_store(uri: str, params: dict[str, int]) -> StoreUri:
    parts = urlsplit(uri)
    if parts.netloc:
        raise InvalidUriError(
            f"malformed sqlite URI {uri!r}: use three slashes and an absolute path, e.g. sqlite:///var/lib/ledger/meta.db")
    if not parts.path.startswith("/") or parts.path.endswith("/"):
        raise InvalidUriError(f"malformed sqlite URI {uri!r}: the database path must be an absolute file path")
    return StoreUri("sqlite", "", parts.path, params)
