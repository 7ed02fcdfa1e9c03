"""Bad input gets clear errors: malformed URIs, unknown schemes, unreachable ZooKeeper."""

from __future__ import annotations

import time

import pytest

from metadata import InvalidUriError, MetadataUnavailableError, open_store, parse_uri
from pyspark_ledger.testing.zookeeper_server import free_port


@pytest.mark.parametrize(
    "uri,fragment",
    [
        ("", "empty"),
        ("localhost:2181", "malformed"),
        ("http://x/y", "unknown metadata URI scheme 'http'"),
        ("zk:///ledgers", "no host:port"),
        ("zk://host/ledgers", "bad host:port 'host'"),
        ("zk://host:99999/ledgers", "bad host:port"),
        ("zk://a:1,b/ledgers", "bad host:port 'b'"),
        ("zk://a:1/le/../x", "bad root path"),
        ("zk://a:1/x?bogus=1", "unknown parameter 'bogus'"),
        ("zk://a:1/x?session_timeout_ms=abc", "positive integer"),
        ("sqlite://relative/path.db", "three slashes"),
        ("sqlite:///tmp/dir/", "absolute file path"),
    ],
)
def test_malformed_uris(uri: str, fragment: str) -> None:
    with pytest.raises(InvalidUriError, match=fragment.replace("(", r"\(")):
        open_store(uri)


def test_uri_parsing() -> None:
    p = parse_uri("zk://127.0.0.1:2181,127.0.0.2:2182/a/b?session_timeout_ms=5000")
    assert (p.scheme, p.hosts, p.path, p.params) == ("zk", "127.0.0.1:2181,127.0.0.2:2182", "/a/b", {"session_timeout_ms": 5000})
    assert parse_uri("zk://127.0.0.1:2181").path == "/ledgers"
    assert parse_uri("sqlite:///var/x.db?ttl_ms=100").params == {"ttl_ms": 100}


def test_unreachable_zookeeper_is_bounded_and_names_the_address() -> None:
    port = free_port()  # nothing listens here
    start = time.monotonic()
    with pytest.raises(MetadataUnavailableError, match=f"127.0.0.1:{port}.*within 2 s"):
        open_store(f"zk://127.0.0.1:{port}/ledgers?connect_timeout_ms=2000")
    assert time.monotonic() - start < 10


def test_embedded_store_in_missing_directory(tmp_path) -> None:
    with pytest.raises(MetadataUnavailableError, match="does not exist"):
        open_store(f"sqlite://{tmp_path}/missing/dir/meta.db")
