"""Reading one option's value: shared by the source's options (source_options.py) and the read selection
(read.py). Spark lower-cases option keys; errors name the documented spelling."""

from __future__ import annotations

from collections.abc import Mapping

from pyspark_ledger.datasource.errors import OptionError


def text_option(options: Mapping[str, str], key: str) -> str | None:
    """The option's value, stripped; None when absent or blank."""
    raw = options.get(key.lower())
    if raw is None:
        return None
    value = str(raw).strip()
    return value or None


def int_option(options: Mapping[str, str], key: str, default: int | None, lo: int, hi: int) -> int | None:
    """The option as an integer in lo..hi, or `default` when absent."""
    raw = text_option(options, key)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(key, f"expected an integer, got {raw!r}") from None
    if not lo <= value <= hi:
        raise OptionError(key, f"must be between {lo} and {hi}, got {value}")
    return value
