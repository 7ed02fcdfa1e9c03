"""Option parsing: typed, checked once, every error names its option. No Spark needed."""

from __future__ import annotations

import json

import pytest

from metadata import LedgerId
from pyspark_ledger.datasource.options.source_options import (
    KNOWN_OPTIONS,
    OptionError,
    default_metadata_uri,
    parse_options,
)
from pyspark_ledger.log import Position

URI = "sqlite:///tmp/x/metadata.db"


def test_defaults_and_case_insensitive_keys() -> None:
    o = parse_options({"METADATASERVICEURI": URI, "Log": "events"})
    assert (o.metadata_uri, o.log, o.ledger) == (URI, "events", None)
    assert (o.starting.kind, o.ending.kind) == ("earliest", "latest")
    assert (o.ensemble_size, o.write_quorum_size, o.ack_quorum_size) == (3, 3, 2)
    assert o.payload_format is None and o.digest_type == "crc32c" and o.password == b""
    assert o.arrow_compression == "lz4" and o.max_entries_per_partition > 0


def test_default_metadata_uri_is_the_quickstart_store(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    monkeypatch.setenv("PYSPARK_LEDGER_HOME", "/srv/ledger-home")
    assert default_metadata_uri() == "sqlite:///srv/ledger-home/metadata.db"
    assert parse_options({"log": "a"}).metadata_uri == "sqlite:///srv/ledger-home/metadata.db"
    monkeypatch.delenv("PYSPARK_LEDGER_HOME")
    assert default_metadata_uri().endswith("/.pyspark-ledger/metadata.db")


def test_typed_values() -> None:
    lid = LedgerId(0, 42)
    pos = Position(3, 7, lid)
    o = parse_options({
        "metadataserviceuri": URI, "ledger": lid.qualified_name, "startingposition": json.dumps(pos.to_json()),
        "endingposition": "LATEST", "maxentriesperpartition": "1000", "password": "pw", "digesttype": "MAC",
        "ensemblesize": "5", "writequorumsize": "3", "ackquorumsize": "2", "payloadformat": "Arrow",
        "arrowbatchrows": "512", "arrowcompression": "zstd", "dataset": "sales", "owner": "acme/billing/etl",
    })
    assert o.ledger == lid and o.log is None and o.starting.position == pos and o.ending.kind == "latest"
    assert (o.max_entries_per_partition, o.password, o.digest_type) == (1000, b"pw", "mac")
    assert (o.ensemble_size, o.write_quorum_size, o.ack_quorum_size) == (5, 3, 2)
    assert (o.payload_format, o.arrow_batch_rows, o.arrow_compression, o.data_set) == ("arrow", 512, "zstd", "sales")
    assert o.owner is not None and (o.owner.enterprise, o.owner.system, o.owner.service) == ("acme", "billing", "etl")


def test_path_is_the_log_name() -> None:
    assert parse_options({"path": "events"}).log == "events"


@pytest.mark.parametrize(
    "given, option",
    [
        ({"log": "a", "maxEntriesPerPartition": "many"}, "maxEntriesPerPartition"),
        ({"log": "a", "maxEntriesPerPartition": "0"}, "maxEntriesPerPartition"),
        ({"log": "a", "startingPosition": "yesterday"}, "startingPosition"),
        ({"log": "a", "endingPosition": '{"seq": 1}'}, "endingPosition"),
        ({"log": "a", "digestType": "md5"}, "digestType"),
        ({"log": "a", "ensembleSize": "2", "writeQuorumSize": "3"}, "writeQuorumSize"),
        ({"log": "a", "ackQuorumSize": "4"}, "ackQuorumSize"),
        ({"log": "a", "payloadFormat": "json"}, "payloadFormat"),
        ({"log": "a", "arrowCompression": "gzip"}, "arrowCompression"),
        ({"log": "a", "arrowBatchRows": "-1"}, "arrowBatchRows"),
        ({"log": "a", "metadataServiceUri": "http://x"}, "metadataServiceUri"),
        ({"log": "a/b"}, "log"),
        ({"ledger": "not-an-id"}, "ledger"),
        ({"log": "a", "ledger": "5"}, "log"),
        ({}, "log"),
        ({"log": "a", "owner": "a/b/c/d/e"}, "owner"),
        ({"log": "a", "testFailMode": "explode"}, "testFailMode"),
    ],
)
def test_bad_values_name_the_option(given: dict[str, str], option: str) -> None:
    with pytest.raises(OptionError) as err:
        parse_options({k.lower(): v for k, v in given.items()})
    assert err.value.option == option and f'"{option}"' in str(err.value)


def test_unknown_option_lists_the_known_ones() -> None:
    with pytest.raises(OptionError) as err:
        parse_options({"log": "a", "startingoffsets": "earliest"})
    msg = str(err.value)
    assert "startingoffsets" in msg and "unknown option" in msg
    for name in ("metadataServiceUri", "startingPosition", "payloadFormat", "maxEntriesPerPartition"):
        assert name in msg
    assert set(KNOWN_OPTIONS.values()) >= {"log", "ledger", "password", "ensembleSize"}


def test_default_source_loads_lazily_and_is_named_ledger() -> None:
    """Spark imports every pyspark_* module: importing ours must not pull in pyspark, and
    `DefaultSource` (what Spark looks up) must be the `ledger` source."""
    import subprocess
    import sys

    code = (
        "import sys, pyspark_ledger; assert 'pyspark' not in sys.modules, 'eager pyspark import'; "
        "src = pyspark_ledger.DefaultSource; "
        "from pyspark.sql.datasource import DataSource; assert issubclass(src, DataSource); print(src.name())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ledger"
