"""The add futures share one condition: they must still behave exactly like concurrent.futures.Future."""

from __future__ import annotations

import threading
import time
from concurrent.futures import FIRST_COMPLETED, wait

import pytest

from pyspark_ledger.transport.add_poller import AddPoller
from pyspark_ledger.ledger.write_handle import _AddFuture, _complete_run, _Pending

# No connections: waiters find nothing to read and wait for other threads, as with gRPC adds.
_POLLER = AddPoller("test-add-future")


def pending(cond: threading.Condition, eid: int) -> _Pending:
    return _Pending(eid, b"", -1, 0, _AddFuture(cond, _POLLER), ())


def test_other_completions_do_not_wake_a_waiter_into_a_timeout() -> None:
    cond = threading.Condition()
    mine, others = pending(cond, 99), [pending(cond, i) for i in range(50)]

    def complete_others() -> None:
        for p in others:
            time.sleep(0.002)
            _complete_run(cond, [p])
        time.sleep(0.05)
        _complete_run(cond, [mine])

    threading.Thread(target=complete_others).start()
    assert mine.future.result(timeout=5) == 99


def test_timeout_exception_callbacks_and_wait() -> None:
    cond = threading.Condition()
    a, b = pending(cond, 1), pending(cond, 2)
    with pytest.raises(TimeoutError):
        a.future.result(timeout=0.05)
    order: list[int] = []
    a.future.add_done_callback(lambda f: order.append(f.result()))
    b.future.add_done_callback(lambda f: order.append(f.result()))
    threading.Timer(0.05, lambda: _complete_run(cond, [a, b])).start()
    done, _ = wait([a.future, b.future], timeout=5, return_when=FIRST_COMPLETED)
    assert done
    assert b.future.result(timeout=5) == 2 and order == [1, 2]
    c = pending(cond, 3)
    c.future.set_exception(RuntimeError("boom"))
    assert isinstance(c.future.exception(timeout=1), RuntimeError)
    with pytest.raises(RuntimeError, match="boom"):
        c.future.result()
