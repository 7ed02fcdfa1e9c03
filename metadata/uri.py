"""Metadata service URIs (parsed once into MetadataSettings, metadata/uri_settings.py) and
open_store(), which picks the implementation from the scheme.

    zk://host:port[,host:port...]/root/path[?session_timeout_ms=N&connect_timeout_ms=N&op_timeout_ms=N]
    sqlite:///absolute/path/to/metadata.db[?ttl_ms=N&poll_ms=N]

op_timeout_ms is the deadline of every ZooKeeper call (default: the session timeout, 10 s).

Either may also carry the client's bookie TLS settings, tls_ca=, tls_cert=, tls_key= (file
paths, docs/security.md): MetadataSettings.tls holds them, and the store ignores them.

ZooKeeper credentials: zk_auth=digest:user:secret or zk_auth=sasl:user:secret (SASL DIGEST-MD5,
for a ZooKeeper with a JAAS Server section of DigestLoginModule users), else the LEDGER_ZK_AUTH
environment variable; every node the store creates then gets a digest or sasl ACL for that user
only (metadata.zk_acl). The settings print with zk_auth=***, and error messages about a URI never
include the secret.
"""

from __future__ import annotations

from metadata.store import MetadataStore
from metadata.uri_settings import (
    DEFAULT_ZK_ROOT,
    TLS_PARAMS,
    ZK_AUTH_ENV,
    ZK_AUTH_PARAM,
    ZK_AUTH_SCHEMES,
    MetadataSettings,
    StoreUri,
    TlsFiles,
    ZkAuth,
    parse_metadata_uri,
    parse_zk_auth,
)

__all__ = [
    "DEFAULT_ZK_ROOT", "TLS_PARAMS", "ZK_AUTH_ENV", "ZK_AUTH_PARAM", "ZK_AUTH_SCHEMES", "MetadataSettings", "StoreUri",
    "TlsFiles", "ZkAuth", "open_store", "parse_metadata_uri", "parse_uri", "parse_zk_auth",
]


def parse_uri(uri: str) -> StoreUri:
    """Where the store a URI names is (its other parts checked too, then left out)."""
    return parse_metadata_uri(uri).store


def metadata_settings(uri: str | MetadataSettings) -> MetadataSettings:
    """`uri` parsed, or the settings themselves."""
    return uri if isinstance(uri, MetadataSettings) else parse_metadata_uri(uri)


def open_store(uri: str | MetadataSettings, *, timeout_s: float | None = None) -> MetadataStore:
    """Open the metadata store a URI (or its settings) names. Connection problems raise
    MetadataUnavailableError. ZooKeeper credentials: the URI's zk_auth, else LEDGER_ZK_AUTH.

    `timeout_s` (for example LedgerClient's metadata_timeout_s) overrides the URI's op_timeout_ms:
    the deadline of every metadata call, which defaults to the session timeout."""
    settings = metadata_settings(uri)
    parsed = settings.store
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
            uri=str(settings),
            auth=None if (auth := settings.resolved_zk_auth()) is None else auth.as_pair(),
        )
    from metadata.embedded_store import DEFAULT_POLL_MS, DEFAULT_TTL_MS, EmbeddedStore

    return EmbeddedStore(
        parsed.path,
        ttl_ms=parsed.params.get("ttl_ms", DEFAULT_TTL_MS),
        poll_ms=parsed.params.get("poll_ms", DEFAULT_POLL_MS),
        uri=str(settings),
    )
