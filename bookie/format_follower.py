"""A bookie follows the cluster setting `storage_format_version` (docs/upgrading.md).

The setting is read at start, before the bookie takes adds, and followed by a store watch: when
an operator raises it, the storage raises its directories' format markers (durably) and then
writes journal records in the new format, with no restart. What the storage does with a value is
its own rule (bookie/storage/format_version.py: capped at what this code writes, never below a
directory's marker).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from bookie.storage.errors import StorageError
from metadata.cluster_settings import ClusterSettings, ClusterSettingsWatch
from metadata.store import MetadataStore

log = logging.getLogger(__name__)


class FormatFollower:
    """Calls `apply(setting)` once now and on every change of storage_format_version."""

    def __init__(self, store: MetadataStore, apply: Callable[[int], int]):
        """apply: takes the setting, returns the format the storage now writes."""
        self._apply = apply
        self._last: int | None = None
        self.writes: int | None = None
        self._watch = ClusterSettingsWatch(store, self._changed)  # calls back once now

    def _changed(self, settings: ClusterSettings) -> None:
        setting = settings.storage_format_version
        if setting == self._last:
            return  # another setting changed
        try:
            self.writes = self._apply(setting)
        except StorageError as exc:
            # The bookie keeps writing what it wrote; the next change of any setting tries again.
            log.warning("storage format setting not applied setting=%d error=%s", setting, exc)
            return
        self._last = setting
        log.info("storage format followed setting=%d writes=%d", setting, self.writes)

    def close(self) -> None:
        self._watch.close()
