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


# Issue 31, item 7: names are checked with a full match; "^...$" with match() let a trailing
# newline through ("$" matches before a final newline).
def test_a_trailing_newline_is_refused_in_every_checked_name() -> None:
    import pytest

    from metadata.errors import InvalidMetadataError, InvalidUriError
    from metadata.ids import LedgerId
    from metadata.paths import LEDGERS, check_name, ledger_id_from_path
    from metadata.registry import check_rack
    from metadata.uri import parse_uri

    qualified = "00000000000000000000000000000007"
    assert LedgerId.from_qualified_name(qualified) == LedgerId(0, 7)
    with pytest.raises(InvalidMetadataError):
        LedgerId.from_qualified_name(qualified + "\n")
    with pytest.raises(InvalidMetadataError):
        LedgerId.parse("\u0661\u0662")  # Arabic-Indic digits: int() takes them, an id does not
    assert check_name("log", "orders") == "orders"
    with pytest.raises(InvalidMetadataError):
        check_name("log", "orders\n")
    path = LEDGERS + "".join("/" + qualified[i:i + 4] for i in range(0, 32, 4))
    assert ledger_id_from_path(path) == LedgerId(0, 7)
    with pytest.raises(InvalidMetadataError):
        ledger_id_from_path(path + "\n")
    assert check_rack("zone-a/rack-1") == "zone-a/rack-1"
    with pytest.raises(InvalidMetadataError):
        check_rack("zone-a\n/rack-1")
    assert parse_uri("zk://127.0.0.1:2181/ledgers").hosts == "127.0.0.1:2181"
    for bad in ("zk://127.0.0.1:2181\n/ledgers", "zk://127.0.0.1:2181\n,127.0.0.1:2182/ledgers",
                "zk://127.0.0.1:2181/ledgers?op_timeout_ms=\u0661\u0662"):
        with pytest.raises(InvalidUriError):
            parse_uri(bad)


def test_no_product_pattern_relies_on_anchors_with_match() -> None:
    """Every name pattern of the product is used with fullmatch: none is written "^...$" (the
    form that, with match(), lets a trailing newline through)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    anchored = re.compile(r"""re\.compile\(r?["']\^.*\$["']""")
    found = [f"{p.relative_to(root)}:{n}" for package in ("bookie", "metadata", "pyspark_ledger")
             for p in sorted((root / package).rglob("*.py")) if not p.name.endswith("_pb2.py")
             for n, line in enumerate(p.read_text().splitlines(), 1) if anchored.search(line)]
    assert found == []
