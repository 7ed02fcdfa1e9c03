"""Starting the kazoo client of a ZooKeeperStore: its connection retry, credentials and logger, and
for SASL credentials a confirmed login."""

from __future__ import annotations

import logging

from kazoo.client import KazooClient
from kazoo.exceptions import AuthFailedError, KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from metadata.errors import MetadataError, MetadataUnavailableError
from metadata.zk_acl import SessionAuth, kazoo_auth_options, kazoo_logger

log = logging.getLogger(__name__)

# What kazoo's connection loop logs at WARNING on every failed attempt while it reconnects
# (with ZooKeeper down: one line per host per retry, a dozen before a call gives up). The store
# says it once instead (ZooKeeperStore: connection lost; start_client: not reachable); these go
# to INFO. With the unbounded retry below, kazoo gives up ("Failed connecting to Zookeeper within
# the connection retry policy") only when the store stops it, after saying why itself: INFO too.
# A login refused ("AUTH_FAILED closing") and the rest stay at WARNING.
KAZOO_RECONNECT_CHATTER = frozenset({
    "Connection dropped: %s", "Connection time-out: %s", "Transition to CONNECTING", "Session has expired",
    "Found a RW server, dropping connection", "Failed connecting to Zookeeper within the connection retry policy.",
})


class _QuietReconnects(logging.Filter):
    """Turns kazoo's reconnect chatter into INFO records (dropped when the logger is above INFO)."""

    def __init__(self, logger: logging.Logger):
        super().__init__()
        self._logger = logger

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and record.msg in KAZOO_RECONNECT_CHATTER:
            record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
            return self._logger.isEnabledFor(logging.INFO)
        return True


def quiet_kazoo_logger() -> logging.Logger:
    """kazoo_logger() (credentials redacted) with its reconnect chatter at INFO."""
    logger = kazoo_logger()
    if not any(isinstance(f, _QuietReconnects) for f in logger.filters):
        logger.addFilter(_QuietReconnects(logger))
    return logger


def start_client(
    hosts: str,
    *,
    session_timeout_s: float,
    connect_timeout_s: float,
    uri: str,
    auth: tuple[str, str] | None,
) -> tuple[KazooClient, SessionAuth]:
    """A connected client (with SASL credentials: logged in), and what tells whether ZooKeeper
    rejects its login later. `uri` is shown in errors: pass it redacted. Not connected within
    connect_timeout_s: MetadataUnavailableError; login rejected: MetadataAuthError."""
    # Reconnection is retried without a count on kazoo's own thread, so that the store comes back
    # whenever ZooKeeper does; callers never wait on it beyond their deadline, and close() ends it.
    client = KazooClient(
        hosts=hosts,
        timeout=session_timeout_s,
        connection_retry=KazooRetry(max_tries=-1, max_delay=2.0),
        logger=quiet_kazoo_logger(),
        **kazoo_auth_options(auth),
    )
    session_auth = SessionAuth(client, uri, auth)
    try:
        client.start(timeout=connect_timeout_s)
    except KazooTimeoutError:
        # kazoo's start() also times out when the SASL login is rejected between the connection and
        # its own check of it (the server answered, then closed the session): say which it was.
        client.stop()
        client.close()
        if session_auth.rejected:
            raise session_auth.authentication_failed("login") from None
        # The one line at WARNING for it (kazoo's attempts went to INFO); then the clean error.
        log.warning("ZooKeeper not reachable hosts=%s within %g s", hosts, connect_timeout_s)
        raise MetadataUnavailableError(
            f"could not connect to ZooKeeper at {hosts} within {connect_timeout_s:g} s (metadata service {uri})"
        ) from None
    if auth is not None and auth[0] == "sasl":
        _confirm_login(client, session_auth, hosts, uri, connect_timeout_s)
    return client, session_auth


def _confirm_login(client: KazooClient, session_auth: SessionAuth, hosts: str, uri: str, timeout_s: float) -> None:
    """kazoo reports the connection before its SASL login: a request queued behind the login is
    answered once the login succeeded, refused when ZooKeeper rejected it (it closes the
    connection: AUTH_FAILED), and never by a server without SASL (kazoo keeps re-sending the login
    until the server expires the session), so it is bounded by the connect timeout."""
    error: MetadataError
    try:
        client.exists_async("/").get(timeout=timeout_s)
        return
    except AuthFailedError:
        error = session_auth.authentication_failed("login")
    except (KazooException, KazooTimeoutError) as exc:
        error = session_auth.authentication_failed("login") if session_auth.rejected else MetadataUnavailableError(
            f"the SASL login to ZooKeeper at {hosts} did not complete within {timeout_s:g} s (metadata service {uri}); "
            f"a server without SASL never completes it: it needs a JAAS Server section and "
            f"authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider (last error: {exc!r})")
    client.stop()
    client.close()
    raise error
