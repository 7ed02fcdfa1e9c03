"""Group commit: the journal thread and the apply thread (their queue: bookie/storage/journal_queue.py).

The journal thread takes everything queued (greedy, up to a group byte limit), writes it with
ONE write and ONE fdatasync, and hands the group to the apply thread, which appends the
group's entries to the entry log, updates the index (through the engine's apply callback) and
only then completes every callback of the group, in journal order. The two threads overlap the
journal write of group N+1 with the entry-log write of group N. Pending bytes (queued and in
flight) are bounded: producers reserve before they enqueue and wait at most their timeout.

At low load (nothing queued, nothing being written or applied) a producer may instead claim the
journal and write, sync and apply its item in its own thread (`claim_inline`/`commit_claimed`):
the same steps in the same order, minus two thread hand-offs of latency. One writer owns the
journal at a time, whichever thread it is, so journal order is still arrival order.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from bookie.status import Status
from bookie.storage.config import JOURNAL_IDLE_WAKE_S
from bookie.storage.journal import JournalPosition, JournalWriter
from bookie.storage.journal_queue import KIND_ADD, JournalItem, JournalQueue
from bookie.storage.stats import StorageStats

log = logging.getLogger(__name__)

ApplyGroup = Callable[[list[JournalItem], JournalPosition], None]

# Groups written to the journal but not yet applied (entry log + index) and acknowledged.
# Two lets the journal write of group N+1 overlap the entry-log write of group N.
APPLY_PIPELINE_GROUPS_MAX = 2
# A full pipeline is re-checked this often (the applier may have failed).
APPLY_HANDOFF_WAIT_S = 0.5


class GroupCommitter:
    """Two threads: the journal thread (write + fdatasync, one of each per group) and the
    apply thread (entry-log append, index update, callbacks). Groups are applied and
    acknowledged strictly in journal order."""

    def __init__(self, queue: JournalQueue, writer: JournalWriter, apply_group: ApplyGroup,
                 stats: StorageStats, group_bytes_max: int, group_wait_s: float,
                 on_failure: Callable[[BaseException], None]) -> None:
        self._queue = queue
        self._writer = writer
        self._apply_group = apply_group
        self._stats = stats
        self._group_bytes_max = group_bytes_max
        self._group_wait_s = group_wait_s
        self._on_failure = on_failure
        self._failed = False
        self._handoff: deque[tuple[list[JournalItem], JournalPosition | None]] = deque()
        self._handoff_lock = threading.Lock()
        self._handoff_ready = threading.Condition(self._handoff_lock)
        self._handoff_space = threading.Condition(self._handoff_lock)
        self._journal_done = False
        self._applying = False  # a group is being applied (by either thread); guarded by _handoff_lock
        self._journal_thread = threading.Thread(target=self._journal_loop, name="bookie-journal",
                                                daemon=True)
        self._apply_thread = threading.Thread(target=self._apply_loop, name="bookie-journal-apply",
                                              daemon=True)

    @property
    def failed(self) -> bool:
        return self._failed

    def start(self) -> None:
        self._apply_thread.start()
        self._journal_thread.start()

    def join(self, timeout_s: float) -> bool:
        """After the queue is closed: wait for both threads and any inline writer to finish."""
        deadline = time.monotonic() + timeout_s
        self._journal_thread.join(timeout_s)
        self._apply_thread.join(max(0.0, deadline - time.monotonic()))
        idle = self._queue.wait_no_writer(max(0.0, deadline - time.monotonic()))
        return idle and not self._journal_thread.is_alive() and not self._apply_thread.is_alive()

    # ---- journal thread ---------------------------------------------------------------

    def _journal_loop(self) -> None:
        try:
            while True:
                group = self._queue.take(self._group_bytes_max, JOURNAL_IDLE_WAKE_S,
                                         self._group_wait_s)
                if group is None:
                    return
                if group:
                    try:
                        end = None if self._failed else self._write(group)
                        # Low load (nothing queued behind this group, the applier idle): apply
                        # here and save a thread hop of add latency. Under load, hand off, so
                        # the next journal write overlaps this group's entry-log write.
                        if not self._queue.has_items() and self._start_applying_if_idle():
                            try:
                                self._apply_one(group, end)
                            finally:
                                self._done_applying()
                        else:
                            self._hand_off(group, end)
                    finally:
                        self._queue.end_write()
        finally:
            with self._handoff_lock:
                self._journal_done = True
                self._handoff_ready.notify_all()

    def claim_inline(self) -> bool:
        """Low load: claim the idle journal so the caller can write, fdatasync and apply one item
        in its own thread (`commit_claimed`), saving two thread hand-offs (to the journal thread
        and back) of add latency. Only when nothing is queued and no group is being written or
        applied, so journal and apply order stay arrival order. Claim under the same lock that
        orders the caller against fences (the engine's), then commit after releasing it: an item
        pushed meanwhile is written after this one."""
        if self._failed or not self._queue.claim_idle():
            return False
        if not self._start_applying_if_idle():
            self._queue.end_write()
            return False
        return True

    def commit_claimed(self, item: JournalItem) -> None:
        """Write, fdatasync and apply `item` after a successful `claim_inline()`; its callback
        runs in this thread. Always releases the claim."""
        try:
            self._apply_one([item], self._write([item]))
        finally:
            self._done_applying()
            self._queue.end_write()

    def _start_applying_if_idle(self) -> bool:
        """Take the applier for a group applied in the calling thread, if no group is waiting
        for it or being applied (apply order must stay journal order)."""
        with self._handoff_lock:
            if self._handoff or self._applying:
                return False
            self._applying = True
            return True

    def _done_applying(self) -> None:
        with self._handoff_lock:
            self._applying = False
            if self._handoff_space._waiters:  # type: ignore[attr-defined] # the journal thread, when the pipeline is full
                self._handoff_space.notify()

    def _write(self, group: list[JournalItem]) -> JournalPosition | None:
        """Write and fdatasync one group; None if the journal failed."""
        stats = self._stats
        try:
            start = self._writer.position.offset
            end = self._writer.append([part for item in group for part in item.parts])
            group_bytes = end.offset - start
            latency_s = self._writer.sync()
            if self._writer.maybe_roll():
                # Same point in the journal, but lets the next checkpoint delete the full file.
                end = self._writer.position
        except OSError as e:
            # After a failed write or fdatasync the file's content is unknown (fsyncgate):
            # never write to this journal again; a restart replays what is really there.
            self._fail(e)
            return None
        stats.groups += 1
        stats.group_records += len(group)
        stats.journal_bytes += group_bytes
        if latency_s:
            stats.fsyncs += 1
            stats.fsync_latency.record(latency_s)
        return end

    def _hand_off(self, group: list[JournalItem], end: JournalPosition | None) -> None:
        with self._handoff_lock:
            while len(self._handoff) >= APPLY_PIPELINE_GROUPS_MAX:
                self._handoff_space.wait(APPLY_HANDOFF_WAIT_S)
            self._handoff.append((group, end))
            self._handoff_ready.notify()

    # ---- apply thread -----------------------------------------------------------------

    def _apply_loop(self) -> None:
        while True:
            with self._handoff_lock:
                while not self._handoff and not self._journal_done:
                    self._handoff_ready.wait(JOURNAL_IDLE_WAKE_S)
                if not self._handoff:
                    return
                group, end = self._handoff.popleft()
                self._applying = True
                self._handoff_space.notify()
            self._apply_one(group, end)
            self._done_applying()

    def _apply_one(self, group: list[JournalItem], end: JournalPosition | None) -> None:
        if end is None or self._failed:
            self._complete(group, Status.INTERNAL_ERROR)
            return
        try:
            self._apply_group(group, end)
        except Exception as e:  # noqa: BLE001 - a bug or an entry-log I/O error: acks would lie
            self._fail(e)
            self._complete(group, Status.INTERNAL_ERROR)
            return
        stats = self._stats
        for item in group:
            if item.kind == KIND_ADD:
                batch = item.payload
                stats.add_batches += 1
                stats.adds += len(batch.ids)
                stats.add_bytes += batch.data_bytes
        self._complete(group, Status.OK)

    def _complete(self, group: list[JournalItem], status: Status) -> None:
        released = 0
        for item in group:
            released += item.reserved_bytes
            if item.on_done is not None:
                try:
                    item.on_done(status)
                except Exception:
                    log.exception("journal callback raised ledger=%s status=%s", item.ledger,
                                  status.name)
        self._queue.release(released)

    def _fail(self, error: BaseException) -> None:
        if not self._failed:
            log.critical("journal failed; all further writes fail until it is reopened or restarted error=%r", error,
                         exc_info=error)
        self._failed = True
        self._queue.close()
        self._on_failure(error)
