"""The metadata URI parsed once into MetadataSettings (metadata/uri_settings.py): every parameter,
errors that name the bad one, settings that are frozen, and a secret that never shows in a repr, a
str, an error or a log line (issue 31, item 8)."""

from __future__ import annotations

import dataclasses
import logging
import pickle

import pytest

from metadata.errors import InvalidUriError
from metadata.uri import MetadataSettings, TlsFiles, ZkAuth, open_store, parse_metadata_uri, parse_uri, parse_zk_auth
from pyspark_ledger import LedgerClient
from pyspark_ledger.datasource.options.source_options import parse_options

SECRET = "s3cr&t=+/9f"  # characters a query string must escape
ZK_AUTH = "zk_auth=digest:app:s3cr%26t%3D%2B/9f"
FULL = ("zk://127.0.0.1:2181,127.0.0.2:2182/app/ledgers?session_timeout_ms=5000&connect_timeout_ms=2000"
        f"&op_timeout_ms=700&tls_ca=/etc/ca.pem&tls_cert=/etc/c.pem&tls_key=/etc/c.key&{ZK_AUTH}")


def test_every_parameter_of_a_zookeeper_uri() -> None:
    s = parse_metadata_uri(FULL)
    assert (s.scheme, s.store.hosts, s.store.path) == ("zk", "127.0.0.1:2181,127.0.0.2:2182", "/app/ledgers")
    assert s.store.params == {"session_timeout_ms": 5000, "connect_timeout_ms": 2000, "op_timeout_ms": 700}
    assert s.tls == TlsFiles("/etc/ca.pem", "/etc/c.pem", "/etc/c.key")
    assert s.zk_auth is not None and (s.zk_auth.scheme, s.zk_auth.user, s.zk_auth.secret) == ("digest", "app", SECRET)
    assert s.zk_auth.as_pair() == ("digest", f"app:{SECRET}")
    assert parse_uri(FULL) == s.store  # the store's part only
    sasl = parse_metadata_uri("zk://h:1/x?zk_auth=sasl:u:pw")
    assert sasl.zk_auth == ZkAuth("sasl", "u", "pw") and sasl.store.path == "/x"
    assert parse_metadata_uri("zk://h:1").store.path == "/ledgers"


def test_every_parameter_of_an_embedded_store_uri() -> None:
    s = parse_metadata_uri("sqlite:///var/lib/m.db?ttl_ms=300&poll_ms=20&tls_ca=/ca.pem")
    assert (s.scheme, s.store.path, dict(s.store.params)) == ("sqlite", "/var/lib/m.db", {"ttl_ms": 300, "poll_ms": 20})
    assert s.tls == TlsFiles(ca="/ca.pem") and s.zk_auth is None


def test_the_whole_uri_round_trips_and_one_parse_serves_a_process() -> None:
    s = parse_metadata_uri(FULL)
    again = parse_metadata_uri(s.uri_with_secrets())
    assert again == s and parse_metadata_uri(again.uri_with_secrets()) is again  # canonical form, cached
    assert parse_metadata_uri(FULL) is s and parse_metadata_uri("  " + FULL + "\n") is s
    shipped = pickle.loads(pickle.dumps(s))  # what a Spark executor gets: the URI string, parsed there
    assert shipped == s and shipped.zk_auth is not None and shipped.zk_auth.secret == SECRET
    assert SECRET.encode() not in pickle.dumps(s.without_secrets())


def test_the_settings_are_frozen() -> None:
    s = parse_metadata_uri(FULL)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.zk_auth = None  # type: ignore[misc]  # the point: a frozen field refuses assignment
    with pytest.raises(TypeError):
        s.store.params["op_timeout_ms"] = 1  # type: ignore[index]  # the point: the mapping is read-only
    assert s.with_zk_auth(None).zk_auth is None and s.zk_auth is not None


@pytest.mark.parametrize("uri,named", [
    ("zk://h:1/x?bogus=1", "unknown parameter 'bogus'"),
    ("zk://h:1/x?ttl_ms=5", "unknown parameter 'ttl_ms'"),
    ("sqlite:///m.db?op_timeout_ms=5", "unknown parameter 'op_timeout_ms'"),
    ("zk://h:1/x?op_timeout_ms=0", "parameter 'op_timeout_ms'.*positive integer"),
    ("zk://h:1/x?session_timeout_ms=abc", "parameter 'session_timeout_ms'.*positive integer"),
    ("sqlite:///m.db?poll_ms=-1", "parameter 'poll_ms'.*positive integer"),
    ("zk://h:1/x?tls_ca=", "parameter 'tls_ca'.*empty"),
    ("zk://h:1/x?tls_cert=/a&tls_cert=/b", "parameter 'tls_cert'.*twice"),
    (f"zk://h:1/x?{ZK_AUTH}&{ZK_AUTH}", "parameter 'zk_auth'.*twice"),
    ("zk://h:1/x?zk_auth=plain:app:s3cr%26t%3D%2B/9f", "parameter 'zk_auth' must be digest:user:secret"),
    ("zk://h:1/x?zk_auth=digest:app", "parameter 'zk_auth' must be digest:user:secret"),
    ("zk://h:1/x?zk_auth=digest:app:***", "parameter 'zk_auth' is redacted"),
    (f"zk://h/x?{ZK_AUTH}", "bad host:port 'h'"),
    (f"zk:///x?{ZK_AUTH}", "no host:port"),
    (f"ftp://h:1/x?{ZK_AUTH}", "unknown metadata URI scheme 'ftp'"),
    ("   ", "empty"),
])
def test_errors_name_the_bad_parameter_and_never_the_secret(uri: str, named: str) -> None:
    with pytest.raises(InvalidUriError, match=named) as exc:
        parse_metadata_uri(uri)
    assert SECRET not in str(exc.value) and "s3cr" not in str(exc.value)


def test_credentials_from_the_environment_and_their_errors() -> None:
    plain = parse_metadata_uri("zk://h:1/x")
    assert plain.resolved_zk_auth({"LEDGER_ZK_AUTH": f"digest:app:{SECRET}"}) == ZkAuth("digest", "app", SECRET)
    assert plain.resolved_zk_auth({}) is None
    inline = parse_metadata_uri(f"zk://h:1/x?{ZK_AUTH}")
    assert inline.resolved_zk_auth({"LEDGER_ZK_AUTH": "digest:other:pw"}) == inline.zk_auth  # the URI's wins
    with pytest.raises(InvalidUriError, match="LEDGER_ZK_AUTH must be") as exc:
        plain.resolved_zk_auth({"LEDGER_ZK_AUTH": f"ip:{SECRET}"})
    assert SECRET not in str(exc.value)
    with pytest.raises(InvalidUriError, match="option zk_auth must be"):
        parse_zk_auth(f"digest::{SECRET}", "option zk_auth")


def test_no_secret_in_any_str_or_repr() -> None:
    s = parse_metadata_uri(FULL)
    opts = parse_options({"metadataServiceUri": FULL, "log": "events"})
    shown = [str(s), repr(s), f"{s}", f"{s!r}", str(s.zk_auth), repr(s.zk_auth), repr(s.store), str(s.store),
             repr(opts), opts.metadata_uri, repr(opts.metadata)]
    for text in shown:
        assert SECRET not in text and "s3cr" not in text, text
    assert "zk_auth=***" in str(s) and "tls_ca=/etc/ca.pem" in str(s) and "op_timeout_ms=700" in str(s)
    assert isinstance(opts.metadata, MetadataSettings) and opts.metadata.zk_auth == s.zk_auth


def test_a_client_started_with_zk_auth_logs_no_secret(zk_uri: str, caplog: pytest.LogCaptureFixture) -> None:
    """A client on a real ZooKeeper, its URI carrying the credentials: every log record of its start,
    its work and its close (kazoo's included, at DEBUG) is free of the secret."""
    uri = parse_metadata_uri(zk_uri).with_zk_auth(ZkAuth("digest", "app", SECRET))
    caplog.set_level(logging.DEBUG)
    with LedgerClient(uri.uri_with_secrets()) as client:
        assert list(client.list_ledgers()) == []
        texts = [client.metadata_uri, repr(client.metadata), client.store.uri]
    with LedgerClient(uri) as again:  # the settings themselves are accepted as well
        assert again.metadata == uri and list(again.list_ledgers()) == []
    with open_store(uri) as store:  # the nodes the clients made carry the digest ACL of the settings' user
        texts.append(store.uri)
    lines = [r.getMessage() for r in caplog.records] + texts
    assert len(caplog.records) > 0 and any("zk_auth=***" in t for t in texts)
    assert [line for line in lines if SECRET in line or "s3cr" in line] == []
