"""ZooKeeper ACLs of the nodes the project creates, and the errors for a refused call.

With credentials (metadata.uri.zk_auth: the URI's zk_auth=digest:user:secret or sasl:user:secret,
or LEDGER_ZK_AUTH) the session authenticates with them and every node it creates gets an ACL
granting that user all rights and nobody else any: `digest:user:<hash>` for digest credentials,
`sasl:user` for SASL ones (ZooKeeper's CREATOR_ALL for such a session, spelled out so it does not
depend on which session created a parent). A client without them can neither read nor change the
ledger metadata: ZooKeeper answers NoAuth, raised as MetadataAuthError. SASL credentials the server
rejects end the session (AUTH_FAILED), also raised as MetadataAuthError, saying so.
"""

from __future__ import annotations

import logging
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import AuthFailedError, NoAuthError
from kazoo.protocol import connection as kazoo_connection
from kazoo.protocol.states import KeeperState
from kazoo.security import make_acl, make_digest_acl

from metadata.errors import MetadataError

log = logging.getLogger(__name__)

ZK_AUTH_ENV = "LEDGER_ZK_AUTH"
# The SASL mechanism of a ZooKeeper whose JAAS `Server` section lists DigestLoginModule users.
SASL_MECHANISM = "DIGEST-MD5"
_HOW_TO_AUTH = f"zk_auth=digest:user:secret or sasl:user:secret on the URI or {ZK_AUTH_ENV}"


class MetadataAuthError(MetadataError):
    """ZooKeeper refused the call: no or wrong credentials for the node's ACL, or it rejected the
    session's SASL login."""


def zk_acl(auth: tuple[str, str] | None) -> list[Any] | None:
    """The default ACL of a session with `auth` (scheme, "user:secret"); None: ZooKeeper's open ACL."""
    if auth is None:
        return None
    user, _, secret = auth[1].partition(":")
    if auth[0] == "sasl":
        return [make_acl("sasl", user, all=True)]
    return [make_digest_acl(user, secret, all=True)]


def kazoo_auth_options(auth: tuple[str, str] | None) -> dict[str, Any]:
    """KazooClient keyword arguments for `auth`: digest credentials go in auth_data (an Auth request
    after each connect), SASL ones in sasl_options (a DIGEST-MD5 exchange after each connect, which
    kazoo does through the pure-sasl package); and the default ACL of the nodes the session creates."""
    if auth is None:
        return {}
    if auth[0] != "sasl":
        return {"auth_data": [auth], "default_acl": zk_acl(auth)}
    if not kazoo_connection.PURESASL_AVAILABLE:
        # kazoo would fail inside its connection thread, and every call would wait out its deadline.
        raise MetadataError("zk_auth=sasl:... needs the pure-sasl package (pip install pure-sasl)")
    user, _, secret = auth[1].partition(":")
    return {"sasl_options": {"mechanism": SASL_MECHANISM, "username": user, "password": secret},
            "default_acl": zk_acl(auth)}


def not_authorized(uri: str, what: str) -> MetadataAuthError:
    """`uri` must already be redacted (str() of metadata.uri_settings.MetadataSettings)."""
    return MetadataAuthError(f"metadata store {uri}: {what.removesuffix('_async')} not authorized by ZooKeeper "
                             f"(NoAuth): give the cluster's credentials as {_HOW_TO_AUTH}")


class SessionAuth:
    """Whether ZooKeeper rejected a client's SASL login. It then closes the connection and kazoo
    stops for good (AUTH_FAILED, then CLOSED): pending calls fail with AuthFailedError and later
    ones only see a closed client, so the store asks here to say which it was, at once instead of
    at its deadline. Listens from before start(): a login can fail right after it returns."""

    def __init__(self, client: KazooClient, uri: str, auth: tuple[str, str] | None):
        self.failed = False
        self._client = client
        self._uri = uri  # redacted
        self._user = auth[1].partition(":")[0] if auth else ""
        client.add_listener(self._on_state)

    def _on_state(self, state: str) -> None:
        # Runs on kazoo's thread while client_state still says why the session ended.
        if state == KazooState.LOST and self._client.client_state == KeeperState.AUTH_FAILED:
            self.failed = True
            log.warning("ZooKeeper rejected the SASL login of user %r (AUTH_FAILED): the session is closed for good "
                        "uri=%s", self._user, self._uri)

    @property
    def rejected(self) -> bool:
        """Whether the server rejected the login (also while kazoo's listeners are being told)."""
        return self.failed or self._client.client_state == KeeperState.AUTH_FAILED

    def authentication_failed(self, what: str) -> MetadataAuthError:
        return MetadataAuthError(
            f"metadata store {self._uri}: ZooKeeper SASL authentication failed for user {self._user!r} "
            f"({what.removesuffix('_async')} refused): wrong user or secret, or the server has no JAAS Server "
            f"section for it; give the cluster's credentials as {_HOW_TO_AUTH}")

    def check(self, what: str) -> None:
        """Raise the authentication error if the server rejected the login."""
        if self.failed:
            raise self.authentication_failed(what)

    def refused(self, exc: NoAuthError | AuthFailedError, what: str) -> MetadataAuthError:
        """The MetadataAuthError for a call ZooKeeper refused with `exc`."""
        if isinstance(exc, AuthFailedError):
            self.failed = True
            return self.authentication_failed(what)
        return not_authorized(self._uri, what)


class _RedactAuthRequests(logging.Filter):
    """kazoo logs every request it sends at DEBUG, the Auth request with its credentials and the
    SASL request with the DIGEST-MD5 response (a hash of the secret): this replaces such an
    argument before any handler formats it."""

    _REDACTED_REQUESTS = ("Auth", "SASL")

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(type(a).__name__ in self._REDACTED_REQUESTS for a in record.args):
            record.args = tuple(f"{type(a).__name__}(<redacted>)" if type(a).__name__ in self._REDACTED_REQUESTS else a
                                for a in record.args)
        return True


def kazoo_logger() -> logging.Logger:
    """The logger a store gives its kazoo client (kazoo logs through the one it is given)."""
    logger = logging.getLogger("kazoo.client.redacted")
    if not any(isinstance(f, _RedactAuthRequests) for f in logger.filters):
        logger.addFilter(_RedactAuthRequests())
    return logger
