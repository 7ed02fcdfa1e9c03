"""A log's settings beyond retention's two bounds: one line each in LOG_SETTINGS.

Stored as strings in the log record's `properties` map under "setting.<name>". Why there and not
in a field of their own: the previous release (0.1.0) keeps `properties` through its compare-and-
set, but drops top-level keys it does not know and refuses unknown keys inside `retention`. A
setting stored here survives a fleet of mixed versions. A stored setting this release does not
know is kept as it is; a setting being set must be known (a typo is an error naming the key).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from metadata.errors import InvalidMetadataError
from metadata.log_record import LogRecord

SETTING_PREFIX = "setting."
SettingValue = int | str | None


@dataclass(frozen=True, slots=True)
class LogSetting:
    name: str
    parse: Callable[[str], SettingValue]  # raises ValueError with a reason
    default: SettingValue
    doc: str


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("must be >= 0")
    return value


def choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return text
    return parse


# One line per setting. Retention's own two bounds (max_age_ms, max_size_bytes) stay in the record's
# `retention` object, which every release reads.
LOG_SETTINGS: dict[str, LogSetting] = {s.name: s for s in (
    LogSetting("backlog_quota_bytes", non_negative_int, None,
               "bytes of the slowest subscription's backlog that policy trim keeps (none: max_size_bytes)"),
    LogSetting("backlog_policy", choice("keep", "trim"), "keep",
               "keep: trim nothing past the slowest subscription; trim: trim anyway, marking it as having lost data"),
    LogSetting("rollover_max_bytes", non_negative_int, 128 * 1024 * 1024,
               "a LogWriter starts a new ledger after this many bytes (0: never by size)"),
    LogSetting("rollover_max_age_ms", non_negative_int, 3_600_000,
               "a LogWriter starts a new ledger after its ledger is this old (0: never by age)"),
)}


def _known(name: str) -> LogSetting:
    setting = LOG_SETTINGS.get(name)
    if setting is None:
        raise InvalidMetadataError(f"unknown log setting {name!r} (known: {', '.join(sorted(LOG_SETTINGS))})")
    return setting


def parse_value(name: str, text: str) -> SettingValue:
    setting = _known(name)
    try:
        return setting.parse(text)
    except ValueError as exc:
        raise InvalidMetadataError(f"log setting {name}={text!r}: {exc}") from None


def get(rec: LogRecord, name: str) -> SettingValue:
    """The setting's value, its default when unset. A stored value this release cannot parse
    (written by hand or a newer release) counts as unset rather than failing every reader."""
    setting = _known(name)
    stored = dict(rec.properties).get(SETTING_PREFIX + name)
    if stored is None:
        return setting.default
    try:
        return setting.parse(stored)
    except ValueError:
        return setting.default


def stored(rec: LogRecord) -> dict[str, str]:
    """Every setting the record holds, known or not (for `ledger logs show`)."""
    return {k[len(SETTING_PREFIX):]: v for k, v in rec.properties if k.startswith(SETTING_PREFIX)}


def with_settings(rec: LogRecord, changes: Mapping[str, str | None]) -> LogRecord:
    """Set (text) or unset (None) known settings; every value is checked before any is applied."""
    for name, text in changes.items():
        if text is not None:
            parse_value(name, text)
        else:
            _known(name)
    props = dict(rec.properties)
    for name, text in changes.items():
        if text is None:
            props.pop(SETTING_PREFIX + name, None)
        else:
            props[SETTING_PREFIX + name] = text
    return replace(rec, properties=tuple(sorted(props.items())))
