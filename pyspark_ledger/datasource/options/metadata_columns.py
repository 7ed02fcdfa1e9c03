"""Option metadataColumns: which metadata columns (rows.py) a read returns (read/columns.py)."""

from __future__ import annotations

from pyspark_ledger.datasource.errors import OptionError
from pyspark_ledger.datasource.rows import META_NAMES

OPTION = "metadataColumns"


def parse_metadata_columns(text: str | None) -> tuple[str, ...]:
    """The option's value as metadata column names in rows.py's order (None: the default, all)."""
    if text is None or text.strip().lower() == "all":
        return META_NAMES
    if text.strip().lower() == "none":
        return ()
    asked = [part.strip().lower() for part in text.split(",") if part.strip()]
    unknown = [name for name in asked if name not in META_NAMES]
    if unknown or not asked:
        what = f"unknown column {unknown[0]!r}" if unknown else "no column named"
        raise OptionError(OPTION, f"{what}: expected all, none, or a comma-separated subset of "
                          f"{', '.join(META_NAMES)}, got {text!r}")
    return tuple(name for name in META_NAMES if name in asked)
