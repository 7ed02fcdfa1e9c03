"""A metadata URI with ZooKeeper credentials, for tests (the product parses URIs into
metadata.uri_settings.MetadataSettings and never splices strings)."""

from __future__ import annotations

from metadata.uri import parse_metadata_uri, parse_zk_auth


def uri_with_zk_auth(uri: str, auth: str | None) -> str:
    """`uri` with zk_auth=auth (replacing any it had; None: `uri` unchanged): the whole string."""
    return uri if auth is None else parse_metadata_uri(uri).with_zk_auth(parse_zk_auth(auth)).uri_with_secrets()


def zk_auth(uri: str, environ: dict[str, str]) -> tuple[str, str] | None:
    """The credentials as the store gets them: the URI's zk_auth, else LEDGER_ZK_AUTH of `environ`."""
    auth = parse_metadata_uri(uri).resolved_zk_auth(environ)
    return None if auth is None else auth.as_pair()


def shown(uri: str) -> str:
    """The URI as logs and messages show it."""
    return str(parse_metadata_uri(uri))
