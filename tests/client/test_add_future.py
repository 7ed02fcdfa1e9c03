"""The add futures of one handle share one condition: they must still keep a future's contract."""

from __future__ import annotations

import threading
import time
from concurrent.futures import InvalidStateError
from dataclasses import dataclass

import pytest

from pyspark_ledger.transport.add_future import AddFuture, AddFutureGroup, complete_run
from pyspark_ledger.transport.add_poller import AddPoller

# No connections: waiters find nothing to read and wait for other threads, as with gRPC adds.
_POLLER = AddPoller("test-add-future")


@dataclass
class Done:
    """A completion as the write handle passes them (its _Pending has these two fields: `last` is
    the id the future resolves to, a run's last entry)."""

    future: AddFuture
    last: int


def pending(group: AddFutureGroup, eid: int) -> Done:
    return Done(AddFuture(group), eid)


def test_other_completions_do_not_wake_a_waiter_into_a_timeout() -> None:
    group = AddFutureGroup(_POLLER)
    mine, others = pending(group, 99), [pending(group, i) for i in range(50)]

    def complete_others() -> None:
        for p in others:
            time.sleep(0.002)
            complete_run(group, [p])
        time.sleep(0.05)
        complete_run(group, [mine])

    threading.Thread(target=complete_others).start()
    assert mine.future.result(timeout=5) == 99
    assert group.waiting == 0


def test_timeout_callbacks_in_entry_order_and_exceptions() -> None:
    group = AddFutureGroup(_POLLER)
    a, b = pending(group, 1), pending(group, 2)
    with pytest.raises(TimeoutError):
        a.future.result(timeout=0.05)
    with pytest.raises(TimeoutError):
        a.future.exception(timeout=0)
    order: list[int] = []
    a.future.add_done_callback(lambda f: order.append(f.result()))
    b.future.add_done_callback(lambda f: order.append(f.result()))
    b.future.add_done_callback(lambda f: order.append(-f.result()))
    threading.Timer(0.05, lambda: complete_run(group, [a, b])).start()
    assert b.future.result(timeout=5) == 2 and a.future.done()
    assert order == [1, 2, -2]
    b.future.add_done_callback(lambda f: order.append(100))  # already done: runs at once
    assert order[-1] == 100
    assert a.future.exception(timeout=0) is None
    assert not a.future.cancel() and not a.future.cancelled()

    c = pending(group, 3)
    c.future.set_exception(RuntimeError("boom"))
    assert isinstance(c.future.exception(timeout=1), RuntimeError)
    with pytest.raises(RuntimeError, match="boom"):
        c.future.result()
    with pytest.raises(InvalidStateError):
        c.future.set_result(3)
    complete_run(group, [c])  # a failed add stays failed
    with pytest.raises(RuntimeError, match="boom"):
        c.future.result()


def test_a_failing_callback_does_not_stop_the_others() -> None:
    group = AddFutureGroup(_POLLER)
    a, b = pending(group, 1), pending(group, 2)
    seen: list[int] = []
    a.future.add_done_callback(lambda f: 1 / 0)
    b.future.add_done_callback(lambda f: seen.append(f.result()))
    complete_run(group, [a, b])
    assert seen == [2]


def test_one_waiter_wakes_for_set_result_from_another_thread() -> None:
    group = AddFutureGroup(_POLLER)
    d = pending(group, 7)
    threading.Timer(0.05, lambda: d.future.set_result(7)).start()
    assert d.future.result(timeout=5) == 7
    assert not d.future.cancel()


def test_the_future_touches_no_private_concurrent_futures_state() -> None:
    import inspect

    from pyspark_ledger.transport import add_future

    source = inspect.getsource(add_future)
    for private in ("concurrent.futures._base", "._state", "._waiters", "._condition"):
        assert private not in source, private
