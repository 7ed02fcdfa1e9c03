"""Bookie flags that are refused with a message naming the flag and the fix, and flags that must
reach the storage engine (bookie/config.py, bookie/server.py _storage_config)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.mark.parametrize("flags, message", [
    (["--entry-log-size-mb", "0"], "--entry-log-size-mb must be in 1.."),
    (["--entry-log-size-mb", "99999999"], "--entry-log-size-mb must be in 1.."),
    (["--minor-compaction-threshold", "0.9", "--major-compaction-threshold", "0.5"], "compaction thresholds"),
    (["--compaction-rate-mb-s", "0"], "--compaction-rate-mb-s"),
    (["--rack", "eu/r1/extra"], "--rack: bad rack 'eu/r1/extra': use 'zone/rack' or 'rack'"),
    (["--rack", "rack 7"], "--rack: bad rack"),
    (["--max-long-polls", "17"], r"--max-long-polls must be in 0\.\.16 \(half of --grpc-workers"),
    (["--grpc-workers", "8", "--max-long-polls", "5"], r"--max-long-polls must be in 0\.\.4"),
    (["--max-long-polls-per-client", "17"], r"--max-long-polls-per-client must be in 0\.\.--max-long-polls \(16\)"),
    (["--max-long-polls-per-client", "-1"], "--max-long-polls-per-client must be in"),
    (["--max-connections-per-peer", "0"], "--max-connections-per-peer must be in 1.."),
    (["--max-connections-per-peer", "300"], r"--max-connections-per-peer must be in 1\.\.--grpc-max-concurrent-rpcs \(256\)"),
    (["--idle-connection-timeout-s", "0"], "--idle-connection-timeout-s must be > 0"),
])
def test_bad_storage_flags_are_refused_with_their_names(tmp_path: Path, flags: list[str], message: str) -> None:
    from bookie.config import ConfigError, build_parser, config_from_args

    args = build_parser().parse_args(["--metadata-uri", "sqlite:///x.db", "--data-dir", str(tmp_path), *flags])
    with pytest.raises(ConfigError, match=message):
        config_from_args(args)


def test_entry_log_size_flag_reaches_the_storage_engine(tmp_path: Path) -> None:
    from bookie.config import build_parser, config_from_args
    from bookie.server import _storage_config

    args = build_parser().parse_args(["--metadata-uri", "sqlite:///x.db", "--data-dir", str(tmp_path),
                                      "--entry-log-size-mb", "64"])
    assert _storage_config(config_from_args(args)).entry_log_max_bytes == 64 * 2**20


@pytest.mark.parametrize("flags, ok", [
    (["--host", "0.0.0.0"], False),
    (["--host", "0.0.0.0", "--advertised-address", "10.0.0.5:3181"], False),  # the add listener too
    (["--host", "0.0.0.0", "--advertised-address", "10.0.0.5:3181", "--advertised-add-address", "10.0.0.5:3182"], True),
    (["--host", "0.0.0.0", "--advertised-address", "10.0.0.5:3181", "--add-port", "-1"], True),
    (["--host", "::"], False),
    (["--host", "127.0.0.2"], True),
])
def test_a_wildcard_host_needs_advertised_addresses(tmp_path: Path, flags: list[str], ok: bool) -> None:
    """A bookie bound to every interface would register 0.0.0.0:port, which sends clients on other
    hosts to themselves (found by the multi-host walkthrough): refused with the fix named."""
    from bookie.config import ConfigError, build_parser, config_from_args

    args = build_parser().parse_args(["--metadata-uri", "sqlite:///x.db", "--data-dir", str(tmp_path), *flags])
    if ok:
        config_from_args(args)
    else:
        with pytest.raises(ConfigError, match="--advertised-address"):
            config_from_args(args)
