"""Starting the kazoo client of a ZooKeeperStore: its connection retry, credentials and logger, and
for SASL credentials a confirmed login."""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.exceptions import AuthFailedError, KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from metadata.errors import MetadataError, MetadataUnavailableError
from metadata.zk_acl import SessionAuth, kazoo_auth_options, kazoo_logger


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
        logger=kazoo_logger(),
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
