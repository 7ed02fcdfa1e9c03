"""ZooKeeper ACLs on a real ZooKeeper (metadata/zk_acl.py): with zk_auth=digest:user:secret on the
metadata URI (or LEDGER_ZK_AUTH) every node the store creates, parents and the ledger root
included, carries a digest ACL for that user only; a client with no or wrong credentials can
neither read nor write the ledger root (ZooKeeper answers NoAuth); URIs that carry the credentials
are redacted wherever they are shown. And the embedded store's SQLite file is owner-only."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from urllib.parse import quote

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from metadata import LedgerManager, open_store
from metadata.uri import parse_metadata_uri
from metadata.zk_acl import MetadataAuthError
from pyspark_ledger.testing.zookeeper_server import LocalZooKeeper
from tests.security.uri_helpers import shown as redact_uri
from tests.security.uri_helpers import uri_with_zk_auth as with_zk_auth
from tests.security.uri_helpers import zk_auth

USER, SECRET = "ledger-admin", "zk-s3cret-0f9a7c"
AUTH = f"digest:{USER}:{SECRET}"


def _root(uri: str) -> str:
    return uri.split("//", 1)[1].split("/", 1)[1].split("?")[0]


def _walk(zk: KazooClient, path: str) -> list[str]:
    out = [path]
    for child in zk.get_children(path):
        out += _walk(zk, f"{path.rstrip('/')}/{child}")
    return out


def test_a_client_without_the_credentials_can_neither_read_nor_write_the_ledger_root(
        zk_server: LocalZooKeeper, zk_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LEDGER_ZK_AUTH", raising=False)
    authed_uri = with_zk_auth(zk_uri, AUTH)
    with open_store(authed_uri) as store:
        store.create("/ledgers/00/0000/L0001", b"metadata of ledger 1")  # parents made on the way
        store.allocate_id()
        assert SECRET not in store.uri and SECRET not in repr(store)
    root = "/" + _root(zk_uri).strip("/")

    # Every node the project created has the digest ACL for USER, and only it.
    owner = KazooClient(hosts=zk_server.hosts, auth_data=[("digest", f"{USER}:{SECRET}")])
    owner.start(timeout=10)
    try:
        nodes = _walk(owner, root)
        assert len(nodes) >= 5, nodes
        for node in nodes:
            acls, _ = owner.get_acls(node)
            assert [(a.id.scheme, a.id.id.split(":")[0], a.perms) for a in acls] == [("digest", USER, 31)], node
    finally:
        owner.stop()
        owner.close()

    # A raw ZooKeeper client without credentials: NoAuth on read, list and write.
    stranger = KazooClient(hosts=zk_server.hosts)
    stranger.start(timeout=10)
    try:
        for attempt in (lambda: stranger.get(root), lambda: stranger.get_children(root),
                        lambda: stranger.create(root + "/intruder", b"x"),
                        lambda: stranger.set(root, b"overwritten")):
            with pytest.raises(NoAuthError):
                attempt()
    finally:
        stranger.stop()
        stranger.close()

    # The project's own store with none or wrong credentials: a clear error naming the cause.
    for uri in (zk_uri, with_zk_auth(zk_uri, f"digest:{USER}:wrong-secret")):
        with open_store(uri) as store:
            for attempt in (lambda: store.get("/ledgers/00/0000/L0001"), lambda: store.children("/"),
                            lambda: store.create("/intruder", b"x"), lambda: LedgerManager(store).scan()):
                with pytest.raises(MetadataAuthError) as refused:
                    result = attempt()
                    list(result) if result is not None and not isinstance(result, bytes) else None
                assert "NoAuth" in str(refused.value) and "zk_auth" in str(refused.value)
                assert SECRET not in str(refused.value) and "wrong-secret" not in str(refused.value)

    # The credentials from LEDGER_ZK_AUTH instead of the URI.
    monkeypatch.setenv("LEDGER_ZK_AUTH", AUTH)
    with open_store(zk_uri) as store:
        assert store.read("/ledgers/00/0000/L0001").value == b"metadata of ledger 1"


def test_zk_auth_is_parsed_checked_and_redacted() -> None:
    uri = "zk://127.0.0.1:2181/ledgers?session_timeout_ms=5000&zk_auth=" + quote(AUTH, safe=":")
    assert zk_auth(uri, environ={}) == ("digest", f"{USER}:{SECRET}")
    assert zk_auth("zk://127.0.0.1:2181/ledgers", environ={"LEDGER_ZK_AUTH": AUTH}) == ("digest", f"{USER}:{SECRET}")
    assert zk_auth("zk://127.0.0.1:2181/ledgers", environ={}) is None
    settings = parse_metadata_uri(uri)  # prints redacted, keeps the whole secret for the store
    assert str(settings) == repr(settings)[len("MetadataSettings('"):-2] == redact_uri(uri)
    assert settings.zk_auth is not None and settings.zk_auth.as_pair() == ("digest", f"{USER}:{SECRET}")
    assert parse_metadata_uri(settings.uri_with_secrets()) == settings
    assert str(parse_metadata_uri("zk://127.0.0.1:2181/ledgers")) == "zk://127.0.0.1:2181/ledgers"
    shown = redact_uri(uri)
    assert SECRET not in shown and "zk_auth=***" in shown and "session_timeout_ms=5000" in shown
    for bad in ("ip:user:pw", "digest:useronly", f"digest::{SECRET}", f"sasl::{SECRET}", "sasl:user"):
        with pytest.raises(ValueError) as exc:
            zk_auth("zk://127.0.0.1:2181/ledgers", environ={"LEDGER_ZK_AUTH": bad})
        assert "pw" not in str(exc.value).replace("password", "") and SECRET not in str(exc.value)
    # A malformed URI's error never carries the credentials either.
    with pytest.raises(ValueError) as exc:
        open_store("zk://127.0.0.1:99999/ledgers?zk_auth=" + AUTH)
    assert SECRET not in str(exc.value)


def test_the_embedded_store_file_is_created_owner_only(tmp_path: Path) -> None:
    old = os.umask(0o022)  # a usual umask would leave it world-readable
    try:
        db = tmp_path / "metadata.db"
        with open_store(f"sqlite://{db}") as store:
            store.create("/ledgers/x", b"v")
            files = sorted(tmp_path.iterdir())  # the database and SQLite's -wal / -shm files, while open
            assert db in files and len(files) >= 2, files
            for path in files:
                assert stat.S_IMODE(path.stat().st_mode) == 0o600, (path, oct(path.stat().st_mode))
    finally:
        os.umask(old)
