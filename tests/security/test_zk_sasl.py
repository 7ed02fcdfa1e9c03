"""ZooKeeper SASL (DIGEST-MD5) on a real ZooKeeper started with a JAAS `Server` section and the SASL
authentication provider (LocalZooKeeper(sasl_users=...)): with zk_auth=sasl:user:secret (URI or
LEDGER_ZK_AUTH) bookie processes register and serve, a LedgerClient creates ledgers and logs, and
every node under the ledger root carries the ACL sasl:<user> with all rights and nothing else. A
client with no credentials, with a digest credential or logged in as another SASL user gets NoAuth;
one with a wrong SASL secret is rejected at login (AUTH_FAILED), and the project's store says so in
one line, at once, without the secret."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import AuthFailedError, ConnectionClosedError, NoAuthError

from metadata import LedgerManager, open_store
from metadata.zk_acl import MetadataAuthError, kazoo_auth_options, kazoo_logger
from pyspark_ledger import LedgerClient
from pyspark_ledger.testing.local_cluster import LocalBookie, LocalCluster
from pyspark_ledger.testing.zookeeper_server import LocalZooKeeper
from tests.security.uri_helpers import shown as redact_uri
from tests.security.uri_helpers import uri_with_zk_auth as with_zk_auth
from tests.security.uri_helpers import zk_auth

USER, SECRET = "ledger", "zk-sasl-s3cret-7d41"
OTHER_USER, OTHER_SECRET = "reporting", "zk-sasl-other-c09e"
AUTH = f"sasl:{USER}:{SECRET}"
WRONG_SECRET = "zk-sasl-wrong-52aa"
ALL_PERMS = 31
LOGIN_BOUND_S = 5.0  # a rejected login is answered in milliseconds here; far below the 10 s deadline
BOOKIE_EXIT_BOUND_S = 60.0  # the interpreter's imports take a few seconds; the login a few milliseconds


@pytest.fixture(scope="module")
def sasl_zk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalZooKeeper]:
    zk = LocalZooKeeper(tmp_path_factory.mktemp("zk-sasl"), sasl_users={USER: SECRET, OTHER_USER: OTHER_SECRET})
    zk.start()
    try:
        yield zk
    finally:
        zk.close()


def _kazoo(zk: LocalZooKeeper, **credentials: Any) -> KazooClient:
    # The project's redacting logger: this test's own digest and SASL logins stay out of caplog too.
    client = KazooClient(hosts=zk.hosts, timeout=10, logger=kazoo_logger(), **credentials)
    client.start(timeout=10)
    return client


def _sasl(user: str, secret: str) -> dict[str, Any]:
    return {"sasl_options": {"mechanism": "DIGEST-MD5", "username": user, "password": secret}}


def _walk(zk: KazooClient, path: str) -> list[str]:
    out = [path]
    for child in zk.get_children(path):
        out += _walk(zk, f"{path.rstrip('/')}/{child}")
    return out


def _refusals(zk: KazooClient, root: str) -> list[Callable[[], object]]:
    """Read, list and write the ledger root and one ledger's node."""
    return [lambda: zk.get(root), lambda: zk.get_children(root), lambda: zk.create(root + "/intruder", b"x"),
            lambda: zk.set(root, b"overwritten"), lambda: zk.delete(root + "/ledgers", recursive=True)]


def test_sasl_cluster_ledgers_and_logs_carry_the_sasl_acl_and_nobody_else_gets_in(
        sasl_zk: LocalZooKeeper, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    root = "/sasl-cluster"
    uri = sasl_zk.uri(root)
    monkeypatch.setenv("LEDGER_ZK_AUTH", AUTH)  # the bookie processes inherit it
    with LocalCluster(3, metadata_uri=uri, work_dir=tmp_path / "cluster") as cluster:
        with LedgerClient(uri) as client:
            assert len(client.bookies()) == 3  # registered through SASL
            writer = client.create_ledger(3, 3, 2)
            for i in range(5):
                writer.add_entry(b"entry %d" % i)
            writer.close()
            log_writer = client.open_log_writer("events", rollover_entries=2)
            for i in range(5):
                log_writer.append(b"event %d" % i)
            log_writer.close()
            assert [e.payload for e in client.open_log_reader("events").read()] == [b"event %d" % i for i in range(5)]
            entries = client.open_ledger(writer.ledger_id).read_entries(0, 4)
            assert [e.payload for e in entries] == [b"entry %d" % i for i in range(5)]
        logs = [b.log_path.read_text(errors="replace") for b in cluster.bookies]
        assert all("bookie serving" in text for text in logs)
        assert not any(SECRET in text for text in logs)
        _assert_only_sasl_acl(sasl_zk, root)
        _assert_strangers_are_refused(sasl_zk, root)
    assert SECRET not in caplog.text
    assert "SASL(<redacted>)" in caplog.text  # kazoo's DEBUG log of the login exchange was redacted


def _assert_only_sasl_acl(zk: LocalZooKeeper, root: str) -> None:
    owner = _kazoo(zk, **_sasl(USER, SECRET))
    try:
        nodes = _walk(owner, root)
        assert any("/bookies/" in n or "available" in n for n in nodes), nodes  # the registrations too
        assert len(nodes) >= 8, nodes
        for node in nodes:
            acls, _ = owner.get_acls(node)
            assert [(a.id.scheme, a.id.id, a.perms) for a in acls] == [("sasl", USER, ALL_PERMS)], node
        owner.set(root, b"")  # the right credentials may write
    finally:
        owner.stop()
        owner.close()


def _assert_strangers_are_refused(zk: LocalZooKeeper, root: str) -> None:
    for credentials in ({}, {"auth_data": [("digest", f"{USER}:{SECRET}")]}, _sasl(OTHER_USER, OTHER_SECRET)):
        stranger = _kazoo(zk, **credentials)
        try:
            for attempt in _refusals(stranger, root):
                with pytest.raises(NoAuthError):
                    attempt()
        finally:
            stranger.stop()
            stranger.close()
    # A wrong SASL secret: the server closes the connection at login; nothing gets through.
    rejected = _kazoo(zk, **_sasl(USER, WRONG_SECRET))
    try:
        for attempt in _refusals(rejected, root):
            with pytest.raises((AuthFailedError, ConnectionClosedError)):
                attempt()
    finally:
        rejected.stop()
        rejected.close()


def test_the_store_without_the_sasl_login_is_refused_with_a_clear_error(
        sasl_zk: LocalZooKeeper, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LEDGER_ZK_AUTH", raising=False)
    uri = sasl_zk.uri("/sasl-store")
    with open_store(with_zk_auth(uri, AUTH)) as store:
        store.create("/ledgers/00/0000/L0001", b"metadata of ledger 1")
        assert SECRET not in store.uri and SECRET not in repr(store)
    # No credentials, a digest credential, another SASL user: NoAuth on every call.
    for auth in (None, f"digest:{USER}:{SECRET}", f"sasl:{OTHER_USER}:{OTHER_SECRET}"):
        with open_store(with_zk_auth(uri, auth)) as store:
            for attempt in (lambda: store.get("/ledgers/00/0000/L0001"), lambda: store.children("/"),
                            lambda: store.create("/intruder", b"x"), lambda: list(LedgerManager(store).scan())):
                with pytest.raises(MetadataAuthError) as refused:
                    attempt()
                assert "NoAuth" in str(refused.value) and "sasl:user:secret" in str(refused.value)
                assert SECRET not in str(refused.value) and OTHER_SECRET not in str(refused.value)
    # A wrong SASL secret: one line naming the problem, at once rather than at the 10 s deadline.
    for open_it in (lambda: open_store(with_zk_auth(uri, f"sasl:{USER}:{WRONG_SECRET}")),
                    lambda: LedgerClient(uri, zk_auth=f"sasl:{USER}:{WRONG_SECRET}")):
        started = time.monotonic()
        with pytest.raises(MetadataAuthError) as rejected:
            open_it()
        elapsed = time.monotonic() - started
        message = str(rejected.value)
        assert elapsed < LOGIN_BOUND_S, elapsed
        assert "SASL authentication failed" in message and f"user {USER!r}" in message, message
        assert "\n" not in message and WRONG_SECRET not in message and SECRET not in message
        assert WRONG_SECRET not in repr(rejected.value) and "zk_auth=***" in message
    # The right credentials from LEDGER_ZK_AUTH instead of the URI.
    monkeypatch.setenv("LEDGER_ZK_AUTH", AUTH)
    with open_store(uri) as store:
        assert store.read("/ledgers/00/0000/L0001").value == b"metadata of ledger 1"


class _RejectedBeforeStartLooks(KazooClient):
    """A KazooClient whose start() looks at its connection only once the connection thread has ended:
    the ordering in which a rejected SASL login ends the session between the connection and
    start()'s own check of it, so that start() reports a connection time-out (met in CI, rarely)."""

    def start_async(self) -> Any:
        connected = super().start_async()
        connection_ended = self._connection.connection_stopped

        class _Event:
            def wait(self, timeout: float | None = None) -> bool:
                # Connected first: the connection thread has begun by then, so its stopped event
                # (set until that thread begins) now means that it ended.
                connected.wait(timeout)
                return connection_ended.wait(timeout)

        return _Event()


def test_a_login_rejected_before_start_returns_is_named_as_the_rejection(
        sasl_zk: LocalZooKeeper, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LEDGER_ZK_AUTH", raising=False)
    monkeypatch.setattr("metadata.zk_session.KazooClient", _RejectedBeforeStartLooks)
    started = time.monotonic()
    with pytest.raises(MetadataAuthError) as rejected:
        open_store(with_zk_auth(sasl_zk.uri("/sasl-race"), f"sasl:{USER}:{WRONG_SECRET}"))
    assert time.monotonic() - started < LOGIN_BOUND_S
    assert "SASL authentication failed" in str(rejected.value) and f"user {USER!r}" in str(rejected.value)
    assert WRONG_SECRET not in str(rejected.value)


def test_a_bookie_with_a_wrong_sasl_secret_exits_saying_so(
        sasl_zk: LocalZooKeeper, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGER_ZK_AUTH", f"sasl:{USER}:{WRONG_SECRET}")
    bookie = LocalBookie(sasl_zk.uri("/sasl-bookie"), tmp_path / "bookie")
    code, log = bookie.run_to_exit(timeout_s=BOOKIE_EXIT_BOUND_S)
    assert code != 0 and "SASL authentication failed" in log, log
    assert WRONG_SECRET not in log


def test_sasl_credentials_are_parsed_passed_to_kazoo_and_redacted() -> None:
    uri = f"zk://127.0.0.1:2181/ledgers?session_timeout_ms=5000&zk_auth={AUTH}"
    assert zk_auth(uri, environ={}) == ("sasl", f"{USER}:{SECRET}")
    assert zk_auth("zk://127.0.0.1:2181/ledgers", environ={"LEDGER_ZK_AUTH": AUTH}) == ("sasl", f"{USER}:{SECRET}")
    shown = redact_uri(uri)
    assert SECRET not in shown and "zk_auth=***" in shown and f"sasl:{USER}" not in shown
    options = kazoo_auth_options(("sasl", f"{USER}:{SECRET}"))
    assert options["sasl_options"] == {"mechanism": "DIGEST-MD5", "username": USER, "password": SECRET}
    assert "auth_data" not in options
    assert [(a.id.scheme, a.id.id, a.perms) for a in options["default_acl"]] == [("sasl", USER, ALL_PERMS)]
    with pytest.raises(ValueError) as bad:
        zk_auth("zk://127.0.0.1:2181/ledgers", environ={"LEDGER_ZK_AUTH": f"sasl::{SECRET}"})
    assert SECRET not in str(bad.value) and "sasl:user:secret" in str(bad.value)
