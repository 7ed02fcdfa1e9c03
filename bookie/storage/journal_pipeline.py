"""The journal part of the storage engine (BookKeeper's Journal): the bounded queue producers
push journal items to, the current journal file, and the group committer that writes, syncs and
hands each group to the applier. Owns the journal directory: replay at open, trimming after a
checkpoint, and replacing a failed file."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from bookie.storage.config import CLOSE_TIMEOUT_S, StorageConfig
from bookie.storage.errors import InvariantError
from bookie.storage.group_commit import ApplyGroup, GroupCommitter
from bookie.storage.journal import (
    JournalPosition,
    JournalWriter,
    RecordHandler,
    ReplayOutcome,
    delete_journal_files_before,
    list_journal_seqs,
    replay_journal,
)
from bookie.storage.journal_queue import JournalQueue
from bookie.storage.stats import StorageStats

log = logging.getLogger(__name__)


class JournalPipeline:
    """`queue` is the producers' side (the write path reserves, pushes, and may claim the idle
    journal through `committer`); the rest is driven by the engine's lifecycle."""

    def __init__(self, directory: Path, config: StorageConfig, stats: StorageStats) -> None:
        self._directory = directory
        self._config = config
        self._stats = stats
        self.queue = JournalQueue(config.max_pending_add_bytes)
        self._writer: JournalWriter | None = None
        self.committer: GroupCommitter | None = None

    @property
    def directory(self) -> Path:
        return self._directory

    @property
    def writer(self) -> JournalWriter:
        if self._writer is None:
            raise InvariantError("journal used before recovery opened it")
        return self._writer

    @property
    def position(self) -> JournalPosition:
        """Where the next record goes."""
        return self.writer.position

    def replay(self, start: JournalPosition, handle: RecordHandler) -> ReplayOutcome:
        """Feed every record from `start` to `handle`, then open a new journal file after all
        the replayed ones (the engine checkpoints next, so those can be deleted)."""
        cfg = self._config
        outcome = replay_journal(self._directory, start, cfg.repair_journal, cfg.fsync, handle)
        self._open_file(max(outcome.last_seq, start.seq) + 1)
        return outcome

    def _open_file(self, seq: int) -> None:
        self._writer = JournalWriter(self._directory, seq, self._config.journal_file_max_bytes,
                                     self._config.fsync)

    def start(self, apply_group: ApplyGroup, on_failure: Callable[[BaseException], None]) -> None:
        """Start a group committer over the current file."""
        cfg = self._config
        self.committer = GroupCommitter(
            self.queue, self.writer, apply_group, self._stats,
            cfg.journal_max_group_bytes, cfg.journal_max_group_wait_ms / 1000.0, on_failure,
        )
        self.committer.start()

    def stop(self) -> bool:
        """Refuse new items, let the committer drain what is queued; True once it stopped."""
        self.queue.close()
        return self.committer.join(CLOSE_TIMEOUT_S) if self.committer is not None else True

    def committer_stopped(self) -> bool:
        """After a failure: True once the failed committer's threads drained their queue."""
        return self.committer is None or self.committer.join(CLOSE_TIMEOUT_S)

    def replace_file(self) -> JournalPosition:
        """Close the current (failed) file and open a new one after every file present;
        returns the new file's start. The caller checkpoints at that position before
        `restart`, so the failed file is never replayed."""
        self.writer.close()
        seq = max([self.writer.position.seq, *list_journal_seqs(self._directory)]) + 1
        self._open_file(seq)
        return self.writer.position

    def restart(self, apply_group: ApplyGroup, on_failure: Callable[[BaseException], None]) -> None:
        """Take items again after replace_file (reservations made meanwhile stay counted)."""
        self.queue.reopen()
        self.start(apply_group, on_failure)

    def trim_before(self, seq: int) -> int:
        """Delete the journal files wholly before file `seq` (a checkpoint covers them)."""
        return delete_journal_files_before(self._directory, seq)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
