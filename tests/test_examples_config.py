"""examples/bookie.toml cannot drift from BookieConfig: it names every key, parses into exactly
the defaults, its commented-out examples have the key's type, and a real bookie starts on it."""

from __future__ import annotations

import re
import tomllib
from dataclasses import MISSING, fields
from pathlib import Path

from bookie.config import BookieConfig, build_parser, config_from_args
from metadata import open_store
from metadata.registry import BookieRegistry
from pyspark_ledger.testing.local_cluster import LocalBookie

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "bookie.toml"
REQUIRED = ("metadata_uri",)
# Optional (--journal-dir with --ledger-dirs replace it), but the example sets it: one directory.
SET_IN_THE_EXAMPLE = ("data_dir",)
_TYPES = {"int": int, "float": (int, float), "str": str, "bool": bool, "Path": str, "Path | None": str,
          "int | None": int, "float | None": (int, float), "str | None": str, "tuple[Path, ...]": list}


def _lines() -> dict[str, tuple[bool, str]]:
    """key -> (commented out, the 'key = value' text) for every assignment line of the file."""
    found: dict[str, tuple[bool, str]] = {}
    for line in EXAMPLE.read_text().splitlines():
        m = re.match(r"^(# )?([a-z_]+) = (.+)$", line)
        if m:
            assert m.group(2) not in found, f"{m.group(2)} appears twice in {EXAMPLE}"
            found[m.group(2)] = (m.group(1) is not None, f"{m.group(2)} = {m.group(3)}")
    return found


def test_the_example_parses_into_exactly_the_defaults() -> None:
    cfg = config_from_args(build_parser().parse_args(["--config", str(EXAMPLE)]))
    raw = tomllib.loads(EXAMPLE.read_text())
    assert cfg == BookieConfig(metadata_uri=raw["metadata_uri"], data_dir=Path(raw["data_dir"]))


def test_every_key_appears_set_to_its_default_or_commented_out_when_unset() -> None:
    lines = _lines()
    names = [f.name for f in fields(BookieConfig)]
    missing = [n for n in names if n not in lines]
    assert not missing, f"keys of BookieConfig missing from {EXAMPLE}: {missing}"
    unknown = sorted(set(lines) - set(names))
    assert not unknown, f"{EXAMPLE} names keys BookieConfig does not have: {unknown}"
    for f in fields(BookieConfig):
        commented, _ = lines[f.name]
        unset = f.default is None
        if f.name in REQUIRED:
            assert f.default is MISSING and not commented, f.name
        elif f.name in SET_IN_THE_EXAMPLE:
            assert not commented, f.name
        else:
            assert commented == unset, (f"{f.name}: default {f.default!r} must be "
                                        + ("commented out (TOML has no null)" if unset else "set, not commented out"))


def test_commented_out_examples_have_the_keys_type(tmp_path: Path) -> None:
    types = {f.name: str(f.type) for f in fields(BookieConfig)}
    for name, (commented, text) in _lines().items():
        if not commented:
            continue
        value = tomllib.loads(text)[name]
        assert isinstance(value, _TYPES[types[name]]), f"{name}: example {value!r} is not {types[name]}"
    # Uncommented together (apart from the mutual-TLS-only identities), they form a valid config.
    body = EXAMPLE.read_text()
    for name, (commented, text) in _lines().items():
        if commented and name != "operator_identities":
            body = body.replace("# " + text, text)
    cfg_path = tmp_path / "bookie-uncommented.toml"
    cfg_path.write_text(body)
    cfg = config_from_args(build_parser().parse_args(["--config", str(cfg_path)]))
    assert cfg.advertised_address == "bookie1.example.net:3181" and cfg.tls_cert is not None


def test_a_real_bookie_starts_on_the_example(tmp_path: Path) -> None:
    """The file as an operator would use it; only the metadata service, the data dir and the
    ports (3181 may be taken) come from the command line."""
    uri = f"sqlite://{tmp_path / 'metadata.db'}"
    bookie = LocalBookie(uri, tmp_path / "bookie", extra_args=["--config", str(EXAMPLE)],
                         log_path=tmp_path / "bookie.log")
    bookie.start()
    try:
        store = open_store(uri)
        try:
            info = BookieRegistry(store).get(bookie.bookie_id)
        finally:
            store.close()
        assert info is not None and info.address == bookie.address and info.add_address.startswith("127.0.0.1:")
    finally:
        assert bookie.stop() == 0
