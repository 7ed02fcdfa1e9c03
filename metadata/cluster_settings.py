"""Cluster settings: what every client and bookie must agree on, in one metadata node.

    /cluster/settings   JSON object {"min_racks_per_write_quorum": 3, "enforce_min_racks": true, ...}

Only keys an operator set are stored; a missing key means its default (so a release that
changes a default changes it for every cluster that never set the key). Unknown keys (set by a
newer release) are kept untouched by every read-modify-write, which is a compare-and-set on the
node's version, so an older tool never drops a newer release's setting.

A setting is known by one line in SETTINGS: its name, type, default and what it means. Values
are checked on `set` (an error names the key); a stored value this release cannot use (written
by a newer release with a wider type, or by hand) is reported in `problems` and its default
used, so a client still starts.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from metadata.errors import BadVersionError, CorruptMetadataError, InvalidMetadataError, NodeExistsError, NoNodeError
from metadata.paths import CLUSTER_SETTINGS
from metadata.store import MetadataStore, RetryPolicy, Versioned, Watch

log = logging.getLogger(__name__)

SettingValue = int | bool | str
SETTINGS_BYTES_MAX = 64 * 1024  # one node; ZooKeeper's own limit is 1 MiB


@dataclass(frozen=True, slots=True)
class Setting:
    name: str
    kind: type[int] | type[bool] | type[str]
    default: SettingValue
    help: str
    minimum: int | None = None  # ints only

    def check(self, value: object) -> SettingValue:
        """The value as this setting's type, or InvalidMetadataError naming the key."""
        if self.kind is bool:
            if not isinstance(value, bool):
                raise InvalidMetadataError(f"cluster setting {self.name}: {value!r} is not true or false")
            return value
        if self.kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidMetadataError(f"cluster setting {self.name}: {value!r} is not an integer")
            if self.minimum is not None and value < self.minimum:
                raise InvalidMetadataError(f"cluster setting {self.name}: {value} is below its minimum {self.minimum}")
            return value
        if not isinstance(value, str):
            raise InvalidMetadataError(f"cluster setting {self.name}: {value!r} is not a string")
        return value

    def parse(self, text: str) -> SettingValue:
        """A value typed on a command line (`KEY=VALUE`)."""
        if self.kind is bool:
            lowered = text.strip().lower()
            if lowered in ("true", "yes", "on", "1"):
                return True
            if lowered in ("false", "no", "off", "0"):
                return False
            raise InvalidMetadataError(f"cluster setting {self.name}: {text!r} is not true or false")
        if self.kind is int:
            try:
                return self.check(int(text.strip()))
            except ValueError:
                raise InvalidMetadataError(f"cluster setting {self.name}: {text!r} is not an integer") from None
        return text


# Every known setting, one line each. Adding a setting is adding a line here.
SETTINGS: dict[str, Setting] = {s.name: s for s in (
    Setting("min_racks_per_write_quorum", int, 2, "racks each write set should span (capped at W)", minimum=1),
    Setting("enforce_min_racks", bool, False, "fail ledger creation and replacement that cannot meet the rack minimum"),
    Setting("storage_format_version", int, 1, "on-disk format bookies write; raise it only once no bookie will be "
            "downgraded (docs/upgrading.md)", minimum=1),
    Setting("salted_password_digests", bool, False, "new ledgers keep a per-ledger salted password digest; turn on "
            "once no client of release 0.1.0 will open ledgers (docs/security.md, docs/upgrading.md)"),
    Setting("message_batches", bool, True, "log writers batch messages (entry format 3, docs/entry-format.md); a "
            "fleet upgraded from release 0.1.0 sets it false first, until no such client reads logs (docs/upgrading.md)"),
    Setting("ledger_key_verifiers", bool, True, "new ledgers keep a verifier of their master key in their custom "
            "metadata, and bookies take no other key for them (docs/security.md; older releases ignore it)"),
    Setting("offload_store", str, "", "where sealed ledgers are offloaded: file:///dir or s3://bucket/prefix, empty for "
            "none (docs/tiered-storage.md)"),
)}


def known_setting(name: str) -> Setting:
    spec = SETTINGS.get(name)
    if spec is None:
        raise InvalidMetadataError(f"unknown cluster setting {name!r} (known: {', '.join(sorted(SETTINGS))})")
    return spec


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    """The typed view of the known settings plus the raw stored map (unknown keys included)."""

    raw: Mapping[str, Any]  # exactly what is stored
    values: Mapping[str, SettingValue]  # every known setting, default filled in (build with from_raw)
    problems: tuple[str, ...] = ()  # stored values this release could not use (their default is used)

    @classmethod
    def from_raw(cls, raw: Mapping[str, Any]) -> ClusterSettings:
        values: dict[str, SettingValue] = {}
        problems = []
        for name, spec in SETTINGS.items():
            if name not in raw:
                values[name] = spec.default
                continue
            try:
                values[name] = spec.check(raw[name])
            except InvalidMetadataError as exc:
                problems.append(f"{exc}; using the default {spec.default!r}")
                values[name] = spec.default
        return cls(MappingProxyType(dict(raw)), MappingProxyType(values), tuple(problems))

    @classmethod
    def from_bytes(cls, data: bytes) -> ClusterSettings:
        if not data:
            return cls.from_raw({})
        try:
            raw = json.loads(data.decode())
        except (ValueError, UnicodeDecodeError) as exc:
            raise CorruptMetadataError(f"unreadable cluster settings at {CLUSTER_SETTINGS}: {exc}") from exc
        if not isinstance(raw, dict):
            raise CorruptMetadataError(f"cluster settings at {CLUSTER_SETTINGS} are not a JSON object")
        return cls.from_raw(raw)

    def to_bytes(self) -> bytes:
        data = json.dumps(dict(self.raw), sort_keys=True).encode()
        if len(data) > SETTINGS_BYTES_MAX:
            raise InvalidMetadataError(f"cluster settings would take {len(data)} bytes, over {SETTINGS_BYTES_MAX}")
        return data

    def value(self, name: str) -> SettingValue:
        return self.values[known_setting(name).name]

    def with_changes(self, changes: Mapping[str, SettingValue | None]) -> ClusterSettings:
        """Known keys set (checked) or, with None, reset to their default; other stored keys kept."""
        raw = dict(self.raw)
        for name, value in changes.items():
            spec = known_setting(name)
            if value is None:
                raw.pop(name, None)
            else:
                raw[name] = spec.check(value)
        return ClusterSettings.from_raw(raw)

    # Typed shortcuts for the settings code reads often.
    @property
    def min_racks_per_write_quorum(self) -> int:
        return int(self.values["min_racks_per_write_quorum"])  # an int: checked by Setting.check

    @property
    def enforce_min_racks(self) -> bool:
        return bool(self.values["enforce_min_racks"])

    @property
    def storage_format_version(self) -> int:
        return int(self.values["storage_format_version"])  # an int: checked by Setting.check

    @property
    def salted_password_digests(self) -> bool:
        return bool(self.values["salted_password_digests"])

    @property
    def message_batches(self) -> bool:
        return bool(self.values["message_batches"])

    @property
    def ledger_key_verifiers(self) -> bool:
        return bool(self.values["ledger_key_verifiers"])


def _parse(got: Versioned | None) -> ClusterSettings:
    return ClusterSettings.from_raw({}) if got is None else ClusterSettings.from_bytes(got.value)


def read_cluster_settings(store: MetadataStore) -> tuple[ClusterSettings, int | None]:
    """The settings and the node's version (None: never set, every default applies)."""
    got = store.get(CLUSTER_SETTINGS)
    return (ClusterSettings.from_raw({}), None) if got is None else (_parse(got), got.version)


def update_cluster_settings(store: MetadataStore, changes: Mapping[str, SettingValue | None],
                            retry: RetryPolicy | None = None) -> ClusterSettings:
    """Read-modify-write by compare-and-set: only the named keys change, unknown keys survive."""
    for name in changes:
        known_setting(name)  # refuse a typo before touching the store
    for delay in [0.0, *(retry or RetryPolicy()).delays()]:
        time.sleep(delay)
        current, version = read_cluster_settings(store)
        new = current.with_changes(changes)
        if dict(new.raw) == dict(current.raw) and version is not None:
            return new
        try:
            if version is None:
                store.create(CLUSTER_SETTINGS, new.to_bytes())
            else:
                store.compare_and_set(CLUSTER_SETTINGS, new.to_bytes(), version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            continue  # somebody else wrote first: re-read and re-apply
        log.info("cluster settings changed changes=%s", dict(changes))
        return new
    raise BadVersionError(CLUSTER_SETTINGS, -1, -1)


class ClusterSettingsWatch:
    """The current settings, kept fresh by a store watch; `on_change` runs on each change (from a
    store thread: keep it quick). An unreadable node keeps the last good settings (logged)."""

    def __init__(self, store: MetadataStore, on_change: Callable[[ClusterSettings], None] = lambda s: None):
        self._on_change = on_change
        self.current = ClusterSettings.from_raw({})
        self.version: int | None = None
        self._watch: Watch = store.watch(CLUSTER_SETTINGS, self._changed)  # calls back once now

    def _changed(self, got: Versioned | None) -> None:
        try:
            settings = _parse(got)
        except CorruptMetadataError as exc:
            log.warning("cluster settings unreadable, keeping the last ones error=%s", exc)
            return
        for problem in settings.problems:
            log.warning("cluster setting unusable: %s", problem)
        self.current, self.version = settings, None if got is None else got.version
        self._on_change(settings)

    def close(self) -> None:
        self._watch.cancel()
