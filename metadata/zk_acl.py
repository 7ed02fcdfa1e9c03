"""ZooKeeper ACLs of the nodes the project creates, and the error for a refused call.

With credentials (metadata.uri.zk_auth: the URI's zk_auth=digest:user:secret or LEDGER_ZK_AUTH)
the session authenticates with them and every node it creates gets a digest ACL granting that
user all rights and nobody else any (ZooKeeper's CREATOR_ALL for a digest session, spelled out so
it does not depend on which session created a parent). A client without them can neither read nor
change the ledger metadata: ZooKeeper answers NoAuth, raised as MetadataAuthError.
"""

from __future__ import annotations

import logging
from typing import Any

from kazoo.security import make_digest_acl

from metadata.errors import MetadataError

ZK_AUTH_ENV = "LEDGER_ZK_AUTH"


class MetadataAuthError(MetadataError):
    """ZooKeeper refused the call: no or wrong credentials for the node's ACL."""


def zk_acl(auth: tuple[str, str] | None) -> list[Any] | None:
    """The default ACL of a session with `auth` (scheme, "user:secret"); None: ZooKeeper's open ACL."""
    if auth is None:
        return None
    user, _, secret = auth[1].partition(":")
    return [make_digest_acl(user, secret, all=True)]


def not_authorized(uri: str, what: str) -> MetadataAuthError:
    """`uri` must already be redacted (metadata.uri.redact_uri)."""
    return MetadataAuthError(f"metadata store {uri}: {what.removesuffix('_async')} not authorized by ZooKeeper "
                             f"(NoAuth): give the cluster's credentials as zk_auth=digest:user:secret on the URI "
                             f"or {ZK_AUTH_ENV}")


class _RedactAuthRequests(logging.Filter):
    """kazoo logs every request it sends at DEBUG, the Auth request with its credentials: this
    replaces such an argument before any handler formats it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(type(a).__name__ == "Auth" for a in record.args):
            record.args = tuple("Auth(<redacted>)" if type(a).__name__ == "Auth" else a for a in record.args)
        return True


def kazoo_logger() -> logging.Logger:
    """The logger a store gives its kazoo client (kazoo logs through the one it is given)."""
    logger = logging.getLogger("kazoo.client.redacted")
    if not any(isinstance(f, _RedactAuthRequests) for f in logger.filters):
        logger.addFilter(_RedactAuthRequests())
    return logger
