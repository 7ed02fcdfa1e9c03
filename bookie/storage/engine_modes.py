"""The storage engine's introspection and modes (read-only, uncertain) and its stats."""

from __future__ import annotations

import logging
import shutil
import time
from typing import Any

from bookie.storage.durable_files import atomic_write, fsync_dir
from bookie.storage.engine_fields import EngineFields
from bookie.storage.engine_types import LedgerKey, LedgerState

log = logging.getLogger(__name__)

UNCERTAIN_MARKER_NAME = "UNCERTAIN"


class ModesMixin(EngineFields):
    """Part of BookieStorage (engine.py): uses its fields and lock."""

    # ---- introspection and modes --------------------------------------------------------

    def ledgers(self) -> list[LedgerKey]:
        with self._lock:
            return [key for key, meta in self._ledgers.items() if not meta.deleted]

    def ledger_state(self, ledger: LedgerKey) -> LedgerState | None:
        with self._lock:
            meta = self._ledgers.get(ledger)
            if meta is None or meta.deleted:
                return None
            return LedgerState(meta.fenced, meta.lac, meta.index.count, meta.index.size_bytes,
                               meta.key is not None)

    def stored_master_key(self, ledger: LedgerKey) -> bytes | None:
        """The master key the ledger was created with, for authorizing requests that carry no
        write (bookie/auth.py); None: unknown, deleted, or known only from a keyless record."""
        with self._lock:
            meta = self._ledgers.get(ledger)
            return None if meta is None or meta.deleted else meta.key

    @property
    def read_only(self) -> bool:
        """Refusing adds: the disk is full (set_read_only) or the journal failed."""
        return self._read_only or self._failed

    @property
    def journal_failed(self) -> bool:
        return self._failed

    def set_read_only(self, read_only: bool) -> None:
        """The disk monitor's verdict. It never makes a bookie whose journal failed writable."""
        if read_only != self._read_only:
            # Turning read-only (a full disk) needs the operator; turning writable again does not.
            log.log(logging.WARNING if read_only else logging.INFO, "storage read_only=%s data_dir=%s", read_only,
                    self._data_dir)
        self._read_only = read_only

    def disk_usage(self) -> tuple[int, int]:
        usage = shutil.disk_usage(self._data_dir)
        return usage.used, usage.total

    @property
    def uncertain(self) -> bool:
        return self._uncertain

    def _enter_uncertain(self, reason: str) -> None:
        atomic_write(self._data_dir / UNCERTAIN_MARKER_NAME,
                     f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')} {reason}\n".encode(), fsync=True)
        self._uncertain = True
        log.error("entering uncertain mode data_dir=%s reason=%s", self._data_dir, reason)

    def clear_uncertain(self) -> None:
        """Operator action, once this bookie's ledgers are known complete (re-replicated)."""
        path = self._data_dir / UNCERTAIN_MARKER_NAME
        path.unlink(missing_ok=True)
        fsync_dir(self._data_dir)
        with self._lock:
            was = self._uncertain
            self._uncertain = False
        if was:
            log.info("uncertain mode cleared by operator data_dir=%s", self._data_dir)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            out = self._stats.to_dict()
            out.update(
                pending_add_bytes=self._queue.pending_bytes,
                pending_add_bytes_max=self._queue.pending_bytes_max,
                ledgers=sum(1 for m in self._ledgers.values() if not m.deleted),
                dirty_ledgers=len(self._dirty),
                applied_journal_position=tuple(self._applied_pos),
                uncertain=self._uncertain,
                read_only=self._read_only or self._failed,
                failed=self._failed,
            )
        return out

