"""AddFuture: the future of one add, the project's own (not a concurrent.futures.Future).

Why not concurrent.futures.Future: each one builds its own Condition and RLock (a third of the
cost of an add), and sharing one between the adds of a handle meant poking CPython's private
`_state`, `_waiters` and `_condition`, which any Python release may change. Here:

- the futures of one handle share one AddFutureGroup: one threading.Condition, one count of the
  threads blocked on it (so completing a run skips notify_all, which is Python code, when nobody
  waits: a caller that reads its own answers never does), and the AddPoller;
- a waiter reads the bookies' answers itself when no other thread does (`AddPoller.drive`): no
  hand-off, no wake-up (transport/add_poller.py);
- `complete_run` resolves a whole run of adds under one lock with one notify, then runs their
  callbacks in entry order;
- an acknowledged add's `result()` takes no lock at all.

The API is the part of concurrent.futures.Future that adds use: result, exception, done,
add_done_callback, cancel (always False), set_result, set_exception. concurrent.futures.wait
and as_completed do not accept it (they need Future's private fields): wait on the newest add
instead (completions are in entry order), or use add_done_callback.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import InvalidStateError
from typing import Protocol

from pyspark_ledger.transport.add_poller import LEADER_RETRY_S

log = logging.getLogger(__name__)

DoneCallback = Callable[["AddFuture"], object]


class Driver(Protocol):
    """Reads answers in the waiting thread (transport.add_poller.AddPoller)."""

    def drive(self, done: Callable[[], bool], deadline: float | None, waiting_on: threading.Condition) -> bool: ...


class Completion(Protocol):
    """One acknowledged add (an entry or a run of them): its future and the entry id it resolves
    to (a run's last)."""

    @property
    def future(self) -> AddFuture: ...

    @property
    def last(self) -> int: ...


class AddFutureGroup:
    """What the futures of one handle share. `waiting` counts the threads blocked on
    `condition`; it changes only under the condition's lock."""

    __slots__ = ("condition", "driver", "waiting")

    def __init__(self, driver: Driver):
        self.condition = threading.Condition()
        self.driver = driver
        self.waiting = 0

    def new_future(self) -> AddFuture:
        return AddFuture(self)


class AddFuture:
    __slots__ = ("_group", "_done", "_result", "_exception", "_callbacks")

    def __init__(self, group: AddFutureGroup):
        self._group = group
        # Written under the group's lock, `_done` last: a reader that sees it set sees the rest.
        self._done = False
        self._result = -1
        self._exception: BaseException | None = None
        self._callbacks: list[DoneCallback] | None = None  # made on first use: most adds have none

    def done(self) -> bool:
        return self._done  # a finished future never changes again: no lock

    def cancelled(self) -> bool:
        return False

    def running(self) -> bool:
        return not self._done

    def cancel(self) -> bool:
        """An add cannot be taken back once queued (as in BookKeeper): skipping it would leave a
        hole in the entry ids that every later add waits behind. Always False."""
        return False

    def result(self, timeout: float | None = None) -> int:
        if self._done and self._exception is None:  # acknowledged: no lock needed
            return self._result
        self._wait(timeout)
        if self._exception is not None:
            raise self._exception
        return self._result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        return self._exception

    def add_done_callback(self, fn: DoneCallback) -> None:
        """fn(future) runs once the add is done (at once, in this thread, if it already is),
        in the thread that completes it: it must not wait for another add."""
        if not self._done:
            with self._group.condition:
                if not self._done:
                    if self._callbacks is None:
                        self._callbacks = [fn]
                    else:
                        self._callbacks.append(fn)
                    return
        _call(self, fn)

    def set_result(self, result: int) -> None:
        self._settle(result, None)

    def set_exception(self, exception: BaseException) -> None:
        self._settle(-1, exception)

    def _settle(self, result: int, exception: BaseException | None) -> None:
        group = self._group
        with group.condition:
            if self._done:
                raise InvalidStateError(f"{self!r} is already done")
            self._result = result
            self._exception = exception
            self._done = True
            callbacks, self._callbacks = self._callbacks, None
            if group.waiting:
                group.condition.notify_all()
        if callbacks:
            for fn in callbacks:
                _call(self, fn)

    def _wait(self, timeout: float | None) -> None:
        if self._done:
            return
        group = self._group
        condition = group.condition
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._done:
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError()
            # Read the answers in this thread if no other thread does: no hand-off, no wake-up.
            if group.driver.drive(self.done, deadline, condition):
                continue
            # Another thread reads (or the answer comes from elsewhere): it completes this future
            # and notifies; try to lead again now and then, as it may stop reading.
            with condition:
                if self._done:
                    return
                slice_s = LEADER_RETRY_S if deadline is None else min(deadline - time.monotonic(), LEADER_RETRY_S)
                group.waiting += 1
                try:
                    condition.wait(max(slice_s, 0.0))
                finally:
                    group.waiting -= 1

    def __repr__(self) -> str:
        if not self._done:
            return f"<AddFuture at {id(self):#x} pending>"
        if self._exception is not None:
            return f"<AddFuture at {id(self):#x} raised {type(self._exception).__name__}>"
        return f"<AddFuture at {id(self):#x} entry {self._result}>"


def complete_run(group: AddFutureGroup, run: Sequence[Completion]) -> None:
    """Resolve many futures of one group with their entry ids: one lock and (only if somebody
    waits) one notify for the whole run, then their callbacks in entry order."""
    with_callbacks: list[tuple[AddFuture, list[DoneCallback]]] | None = None
    with group.condition:
        for c in run:
            f = c.future
            if not f._done:  # this module's own fields
                f._result = c.last
                f._done = True
                callbacks = f._callbacks
                if callbacks is not None:
                    f._callbacks = None
                    if with_callbacks is None:
                        with_callbacks = []
                    with_callbacks.append((f, callbacks))
        if group.waiting:
            group.condition.notify_all()
    if with_callbacks is not None:
        for f, callbacks in with_callbacks:
            for fn in callbacks:
                _call(f, fn)


def _call(future: AddFuture, fn: DoneCallback) -> None:
    try:
        fn(future)
    except Exception:  # as concurrent.futures: one bad callback must not stop the rest
        log.exception("exception calling callback for %r", future)
