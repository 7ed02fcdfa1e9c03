"""docs/spark.md documents every option the source accepts, each in a table row of its own or of
its group (`a` / `b`), so the connector page cannot fall behind the parser. No JVM."""

from __future__ import annotations

import re
from pathlib import Path

from pyspark_ledger.datasource.options.source_options import KNOWN_OPTIONS, STREAM_OPTION_NAMES

DOC = Path(__file__).resolve().parents[2] / "docs" / "spark.md"
SPARK_OWN = {"path"}  # the load()/save() argument, documented in the `log` row


def _documented_options() -> set[str]:
    names: set[str] = set()
    for line in DOC.read_text().splitlines():
        if line.startswith("| `"):
            first_cell = line.split("|")[1]
            names.update(re.findall(r"`([A-Za-z_]+)(?:\(s\))?`", first_cell))
            names.update(n + "s" for n in re.findall(r"`([A-Za-z_]+)\(s\)`", first_cell))
    return names


def test_every_option_has_a_row_in_the_connector_page() -> None:
    accepted = (set(KNOWN_OPTIONS.values()) | set(STREAM_OPTION_NAMES)) - SPARK_OWN
    missing = sorted(accepted - _documented_options())
    assert not missing, f"options missing from {DOC.name}'s tables: {missing}"


def test_the_check_sees_a_missing_row() -> None:
    """The check itself: a name that has no row is reported."""
    assert "noSuchOption" not in _documented_options()
    assert "maxBytesPerTrigger" in _documented_options()
