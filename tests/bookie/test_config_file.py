"""A bookie config file with a wrong key or a value of the wrong type is refused by the real
`bookie` command with one line on stderr naming the key, the type it must be and the file, and
exit status 2 (as argparse does for a bad flag), never a traceback (bookie/config.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bookie.config import ConfigError, checked_file_values

REPO = Path(__file__).resolve().parents[2]
VALID = 'metadata_uri = "sqlite:///{dir}/metadata.db"\ndata_dir = "{dir}/data"\n'


def run_bookie_with(tmp_path: Path, extra: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "bookie.toml"
    config.write_text(VALID.format(dir=tmp_path) + extra)
    return subprocess.run([sys.executable, "-m", "bookie.server", "--config", str(config)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("extra, says", [
    ('port = "abc"\n', "port must be an integer, got a string ('abc')"),
    ('gc_interval_s = "300"\n', "gc_interval_s must be a number, got a string ('300')"),
    ("fsync = 1\n", "fsync must be true or false, got an integer (1)"),
    ("port = true\n", "port must be an integer, got a boolean (True)"),
    ('bookie_id = ["a", "b"]\n', "bookie_id must be a string, got an array (['a', 'b'])"),
    ("journal_sync_interval_ms = 5\n", "unknown key journal_sync_interval_ms"),
])
def test_a_bad_config_file_is_one_line_naming_key_type_and_file(tmp_path: Path, extra: str, says: str) -> None:
    done = run_bookie_with(tmp_path, extra)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"bookie: error: {tmp_path / 'bookie.toml'}: "), lines[0]
    assert says in lines[0]
    assert "Traceback" not in done.stderr


def test_a_config_file_that_is_not_toml_is_one_line(tmp_path: Path) -> None:
    done = run_bookie_with(tmp_path, "port = \n")
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "cannot read config file" in done.stderr


def test_numbers_for_float_keys_may_be_written_as_integers(tmp_path: Path) -> None:
    values = checked_file_values({"disk_usage_threshold": 1, "port": 3181, "data_dir": "/d"}, tmp_path / "b.toml")
    assert values == {"disk_usage_threshold": 1.0, "port": 3181, "data_dir": "/d"}
    assert isinstance(values["disk_usage_threshold"], float)


def test_unknown_keys_are_all_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown keys colour, flavour"):
        checked_file_values({"flavour": 1, "colour": 2, "port": 1}, tmp_path / "b.toml")
