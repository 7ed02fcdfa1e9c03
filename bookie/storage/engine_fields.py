"""The fields BookieStorage.__init__ sets (engine.py), declared once for the mixins that use
them (engine_*.py), so that a type checker sees the whole engine from any of its parts.

Declarations only: nothing here runs, and the methods under TYPE_CHECKING come last in the
engine's MRO, behind the mixins that define them."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bookie.status import Status
    from bookie.storage.config import StorageConfig
    from bookie.storage.engine_types import LedgerKey, _LacWaiters
    from bookie.storage.entry_log import EntryLogs
    from bookie.storage.group_commit import GroupCommitter, JournalQueue
    from bookie.storage.index_store import IndexStore
    from bookie.storage.journal import JournalPosition, JournalWriter
    from bookie.storage.ledger_index import LedgerMeta
    from bookie.storage.range_read import RangeRead
    from bookie.storage.stats import StorageStats


class EngineFields:
    """BookieStorage's state; see BookieStorage.__init__ for what each field guards."""

    _config: StorageConfig
    _data_dir: Path
    _journal_dir: Path
    _entries_dir: Path
    _ledgers_dir: Path
    _index_store: IndexStore | None
    _lock_fd: int
    _lock: threading.Lock
    _checkpoint_lock: threading.Lock
    _ledgers: dict[LedgerKey, LedgerMeta]
    _dirty: set[LedgerKey]
    _lac_waiters: dict[LedgerKey, _LacWaiters]
    _stats: StorageStats
    _queue: JournalQueue
    _entry_logs: EntryLogs | None
    _writer: JournalWriter | None
    _committer: GroupCommitter | None
    _applied_pos: JournalPosition
    _checkpointed_pos: JournalPosition | None
    _uncertain: bool
    _read_only: bool
    _closed: bool
    _failed: bool
    _failure: BaseException | None
    _failure_listeners: list[Callable[[BaseException], None]]
    _reads_inflight: int
    _corrupt_log_next: float
    _corrupt_log_suppressed: int
    _reads_drained: threading.Condition
    _stop: threading.Event
    _checkpoint_thread: threading.Thread | None

    if TYPE_CHECKING:
        # Defined by engine.py and the mixins; called across them.
        @property
        def _logs(self) -> EntryLogs: ...

        def checkpoint(self) -> None: ...

        def entry_log_usage(self) -> dict[int, tuple[int, int]]: ...

        def reclaim_entry_logs(self) -> int: ...

        def read_runs(self, ledger: LedgerKey, first: int, last: int, max_entries: int,
                      max_bytes: int) -> tuple[Status, RangeRead | None]: ...
