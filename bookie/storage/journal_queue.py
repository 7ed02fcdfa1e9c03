"""The journal's queue: the items waiting to be journaled, and how a group is taken from them.

Producers (the add, fence, LAC and delete paths) push items; one writer at a time (the journal
thread, or a caller writing inline at low load) takes a group and writes it with one write and one
fdatasync (bookie/storage/group_commit.py). Pending add bytes are bounded: producers reserve before
they push and wait at most their timeout.

Bulk items (recovery adds: re-replication copies, a recovery's re-adds) yield to the others: a
group carries at most BULK_GROUP_BYTES_MAX of them (one item when a single one is larger), and
items queued behind a bulk item that waits go ahead of it, unless they are of the same ledger
(per-ledger journal order is arrival order). Measured (docs/autorecovery.md): a running writer's
small adds waited behind every copy byte queued before them at a replacement bookie, in one large
group write and fdatasync; now at most one bounded slice of copies rides in any group.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from bookie.status import Status
from bookie.storage.errors import ensure

KIND_ADD = 1
KIND_LAC = 2
KIND_CONTROL = 3  # master key, fence, delete: nothing to apply after durability

Callback = Callable[[Status], None]

# Bulk bytes one group carries at most (one bulk item when a single one is larger): a writer's add
# waits behind at most this much of copies in a group write and fdatasync. Two 256 KiB copies.
BULK_GROUP_BYTES_MAX = 512 * 2**10
# Items one take looks at past waiting bulk items (each look is a few Python steps under the lock).
BULK_SCAN_ITEMS_MAX = 4096


class JournalItem:
    """One request's journal records. `parts` are the framed records (header, body, ...),
    joined with the rest of the group by the journal thread. Adds reserve their bytes against
    the pending bound; control items (fence, LAC, delete) reserve nothing: each is a few dozen
    bytes and its caller blocks until it is durable, so the caller threads bound their number.
    `bulk` items (recovery adds) yield to the others in a group (see the module's docstring)."""

    __slots__ = ("parts", "size", "reserved_bytes", "kind", "ledger", "payload", "on_done", "bulk")

    def __init__(self, parts: tuple[bytes | memoryview, ...], kind: int, ledger: tuple[int, int],
                 payload: Any, on_done: Callback | None, reserved_bytes: int = 0, bulk: bool = False) -> None:
        self.bulk = bulk
        self.parts = parts
        self.size = sum(len(p) for p in parts)
        self.reserved_bytes = reserved_bytes
        self.kind = kind
        self.ledger = ledger
        self.payload = payload
        self.on_done = on_done


class JournalQueue:
    def __init__(self, pending_bytes_max: int) -> None:
        self._pending_bytes_max = pending_bytes_max
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._space = threading.Condition(self._lock)
        self._items: deque[JournalItem] = deque()
        self._bulk_queued = 0  # bulk items in _items: none, and a take drains as plain FIFO
        self._pending_bytes = 0
        self._closed = False
        self._taker_waiting = False
        # A writer (the journal thread, or a caller writing inline) owns the journal between
        # taking items and finishing their write: writes, and so journal order, never interleave.
        self._writing = False
        self._write_done = threading.Condition(self._lock)
        # Condition.notify is Python code: the per-add path skips it when the condition's own
        # waiter list (CPython's Condition._waiters) is empty, the common case.

    def has_items(self) -> bool:
        return bool(self._items)

    @property
    def pending_bytes(self) -> int:
        return self._pending_bytes

    @property
    def pending_bytes_max(self) -> int:
        return self._pending_bytes_max

    def reserve(self, nbytes: int, timeout_s: float) -> bool:
        """Reserve room for `nbytes` of adds, waiting at most `timeout_s`. False = busy.
        After close the reservation succeeds so the caller's push fails with a clear reason."""
        ensure(0 < nbytes <= self._pending_bytes_max, "reservation larger than the bound")
        with self._lock:
            if not self._space.wait_for(
                lambda: self._closed or self._pending_bytes + nbytes <= self._pending_bytes_max,
                timeout_s,
            ):
                return False
            self._pending_bytes += nbytes
            return True

    def release(self, nbytes: int) -> None:
        if not nbytes:
            return
        with self._lock:
            self._pending_bytes -= nbytes
            ensure(self._pending_bytes >= 0, "pending bytes went negative")
            if self._space._waiters:  # type: ignore[attr-defined]  # Condition's private waiter list
                self._space.notify_all()

    def push(self, item: JournalItem) -> bool:
        """Non-blocking; False once the queue is closed (shutdown or journal failure)."""
        with self._lock:
            if self._closed:
                return False
            self._items.append(item)
            self._bulk_queued += item.bulk
            if self._taker_waiting:  # Condition.notify is Python code: skip it when no one waits
                self._work.notify()
            return True

    def claim_idle(self) -> bool:
        """Claim the journal for an inline write: only when nothing is queued and no one is
        writing (so journal order stays arrival order). Pair with `end_write()`."""
        with self._lock:
            if self._items or self._writing or self._closed:
                return False
            self._writing = True
            return True

    def end_write(self) -> None:
        """The current writer is done: the journal thread may take the next group."""
        with self._lock:
            self._writing = False
            if self._items and self._taker_waiting:
                self._work.notify()
            if self._write_done._waiters:  # type: ignore[attr-defined]  # Condition's private waiter list
                self._write_done.notify_all()

    def wait_no_writer(self, timeout_s: float) -> bool:
        """Wait (bounded) until no one is writing: shutdown must not close files under an
        inline writer. True if idle."""
        with self._lock:
            return self._write_done.wait_for(lambda: not self._writing, timeout_s)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._work.notify_all()
            self._space.notify_all()

    def reopen(self) -> None:
        """After a journal failure, once the failed committer's threads are gone and the journal
        is replaced (bookie.writable_again): take items again. Reservations stay counted here."""
        with self._lock:
            self._closed = False

    def take(self, group_bytes_max: int, idle_wait_s: float, group_wait_s: float) -> list[JournalItem] | None:
        """Drain a group: at least one item, then greedily more while under the byte limit.
        Waits at most `idle_wait_s` for the first item and `group_wait_s` for more.
        Returns [] when idle, None when closed and empty."""
        with self._lock:
            if not self._items or self._writing:
                if self._closed and not self._items:
                    return None
                self._wait_for_work(idle_wait_s)
                if not self._items or self._writing:
                    return None if self._closed and not self._items else []
            self._writing = True  # released by end_write() once the group is written
            group = [self._items.popleft()]  # the head always goes: every take makes progress
            self._bulk_queued -= group[0].bulk
            total = group[0].size
            deadline = time.monotonic() + group_wait_s if group_wait_s > 0 else 0.0
            while True:
                total = self._drain_into(group, total, group_bytes_max)
                if self._items or total >= group_bytes_max or self._closed or not deadline:
                    return group
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return group
                self._wait_for_work(remaining)

    def _wait_for_work(self, timeout_s: float) -> None:
        """Under the lock: wait for a push (which notifies only while a taker says it waits)."""
        self._taker_waiting = True
        try:
            self._work.wait(timeout_s)
        finally:
            self._taker_waiting = False

    def _drain_into(self, group: list[JournalItem], total: int, group_bytes_max: int) -> int:
        """Move queued items into `group` while it stays under `group_bytes_max`; returns its
        bytes. With bulk items queued, they yield (the module's docstring)."""
        items = self._items
        if not self._bulk_queued:  # the common case, and every add's: plain FIFO
            while items and total + items[0].size <= group_bytes_max:
                item = items.popleft()
                group.append(item)
                total += item.size
            return total
        bulk_bytes = sum(item.size for item in group if item.bulk)
        held: list[JournalItem] = []
        held_ledgers: set[tuple[int, int]] = set()
        for _ in range(min(len(items), BULK_SCAN_ITEMS_MAX)):
            if total + items[0].size > group_bytes_max:
                break
            item = items.popleft()
            if item.ledger in held_ledgers or (item.bulk and bulk_bytes and bulk_bytes + item.size > BULK_GROUP_BYTES_MAX):
                held.append(item)  # its ledger's later items wait with it: per-ledger order is arrival order
                held_ledgers.add(item.ledger)
                continue
            group.append(item)
            total += item.size
            if item.bulk:
                bulk_bytes += item.size
                self._bulk_queued -= 1
        items.extendleft(reversed(held))
        ensure(self._bulk_queued >= 0, "bulk items queued went negative")
        return total
