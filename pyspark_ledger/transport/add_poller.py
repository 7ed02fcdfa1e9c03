"""Who reads the bookies' add answers: the thread that waits for them.

Every plain-TCP add connection of one client (SocketAddStream) is in one epoll set here. A thread
waiting for an add (`AddFuture.result`, transport/add_future.py) does not sleep while another
thread reads the answer and wakes it: it reads the answers itself (`drive`), as an event loop
would, so a synchronous add costs no thread hand-off at all on the client. Every wake-up of another thread is a context
switch, which the hypervisor makes expensive on this project's 2-core VM: with a receiver thread
per connection a synchronous add cost the client 6.8 context switches and ~340 us of CPU, with
this about 3 and ~280 us, and pipelined adds gain 5-25% throughput (bench/client_bench.py).

Only one thread reads at a time (the leader, holding `_lead`). When no caller has read for
GRACE_S, a background thread reads instead: answers nobody waits for (adds made with
add_entry_async and callbacks, recovery adds) are handled within about GRACE_S, and a bookie
hanging up an idle connection is noticed at once. A caller that finds another thread reading
waits for its future as before (the reader completes it); the background reader hands over
after its next answer and tells the caller, and other callers try again every LEADER_RETRY_S.

A thread that completes an add outside the poller (a gRPC stream's receiver, a timeout, an
ensemble change) calls `wake()`, which interrupts a leader blocked in epoll_wait so it can see
that its future is done. Leaders also wake every POLL_SLICE_S on their own, as a backstop.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
from collections.abc import Callable, Sized
from typing import Protocol

log = logging.getLogger(__name__)

# The background reader stays out of the way while callers read: it takes over once no caller
# has read for this long. It then reads until a caller wants to again.
GRACE_S = 0.005
# A leader's longest epoll_wait: it re-checks its own condition at least this often.
POLL_SLICE_S = 0.05
# A caller that could not lead (another thread reads) tries again this often.
LEADER_RETRY_S = 0.002


class _HasFileno(Protocol):
    def fileno(self) -> int: ...


class PolledStream(Protocol):
    """What the poller needs of a connection it reads for (add_streams.SocketAddStream). The
    streams import nothing from here: they register with anything that has register/unregister,
    and this module never imports them, so the two stay one-way apart."""

    @property
    def sock(self) -> _HasFileno: ...

    @property
    def pending(self) -> Sized: ...  # answers owed: empty when nothing is in flight

    def on_readable(self) -> None: ...  # read what arrived; called by one thread at a time

    def finish(self, reason: str) -> None: ...  # the poller is closing: fail what is pending


class AddPoller:
    def __init__(self, name: str = "add-poller"):
        self._epoll = select.epoll()
        self._streams: dict[int, PolledStream] = {}
        self._lock = threading.Lock()  # registration
        self._lead = threading.Lock()  # held by the thread reading answers
        self._leader: int | None = None  # its thread ident
        self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._epoll.register(self._wake_fd, select.EPOLLIN)
        self._last_caller_read = 0.0
        self._caller_waiting = False  # a caller found the background thread reading
        self._handover_to: set[threading.Condition] = set()  # where those callers wait
        self._closed = False
        self._background_cv = threading.Condition()
        self._thread = threading.Thread(target=self._background, name=name, daemon=True)
        self._thread.start()

    # ---- streams ------------------------------------------------------------------------------

    def register(self, stream: PolledStream) -> None:
        with self._lock:
            if self._closed:
                raise OSError("add poller closed")
            fd = stream.sock.fileno()
            self._streams[fd] = stream
            self._epoll.register(fd, select.EPOLLIN)

    def unregister(self, stream: PolledStream) -> None:
        """Before the stream's socket closes (so its fd number cannot be reused under us)."""
        with self._lock:
            fd = stream.sock.fileno()
            if fd >= 0 and self._streams.get(fd) is stream:
                del self._streams[fd]
                try:
                    self._epoll.unregister(fd)
                except OSError:
                    pass  # already gone with its socket

    def _outstanding(self) -> bool:
        """Some connection owes answers (a caller reading for nothing would only wait)."""
        return any(s.pending for s in list(self._streams.values()))

    # ---- reading --------------------------------------------------------------------------------

    def drive(self, done: Callable[[], bool], deadline: float | None, waiting_on: threading.Condition) -> bool:
        """Read answers in this thread until done() or the deadline. False at once if another
        thread is reading (the caller then waits on `waiting_on`, which the reader notifies when
        it completes the caller's add or hands reading over), or if no answer is outstanding on
        any connection (what the caller waits for comes from elsewhere). As with any Future,
        an add's callback must not wait for another add: it runs in the thread that reads."""
        if not self._outstanding():
            return False
        me = threading.get_ident()
        if not self._lead.acquire(blocking=False):
            with self._lock:
                self._handover_to.add(waiting_on)
            self._caller_waiting = True  # the background reader hands over after its next answer
            return False
        self._leader = me
        try:
            self._read_until(done, deadline)
        finally:
            self._leader = None
            self._last_caller_read = time.monotonic()
            self._lead.release()
        return True

    def _read_until(self, done: Callable[[], bool], deadline: float | None) -> None:
        while not done():
            timeout = POLL_SLICE_S
            if deadline is not None:
                timeout = min(timeout, deadline - time.monotonic())
                if timeout <= 0:
                    return
            self._read(timeout)

    def wake(self) -> None:
        """Called after completing an add outside the poller: interrupt a leader (in another
        thread) blocked in epoll_wait, so it sees that its future is done."""
        leader = self._leader
        if leader is not None and leader != threading.get_ident():
            self.wake_all()

    def _read(self, timeout: float) -> None:
        """Leader only: wait (bounded) for answers and hand each readable connection's to it."""
        try:
            events = self._epoll.poll(timeout)
        except (OSError, ValueError):  # ValueError: the epoll set was closed under us
            if self._closed:
                return
            raise
        streams = self._streams
        for fd, _ in events:
            if fd == self._wake_fd:
                try:
                    os.eventfd_read(self._wake_fd)
                except OSError:
                    pass  # another leader drained it first, or closing
                continue
            stream = streams.get(fd)
            if stream is not None:
                stream.on_readable()

    def _background(self) -> None:
        """Read whenever no caller has for GRACE_S: answers nobody waits for (async adds with
        callbacks, recovery adds) and hang-ups of idle connections are handled promptly."""
        while True:
            with self._background_cv:
                while not self._closed:
                    quiet = time.monotonic() - self._last_caller_read
                    if self._leader is None and quiet >= GRACE_S:
                        break
                    self._background_cv.wait(max(GRACE_S - quiet, GRACE_S / 2))
                if self._closed:
                    return
            if not self._lead.acquire(blocking=False):
                continue
            self._leader = threading.get_ident()
            self._caller_waiting = False
            try:
                # Until a caller wants to read itself (it then waits for us at most one answer).
                while not self._closed and not self._caller_waiting:
                    self._read(POLL_SLICE_S)
            except Exception:  # the reader must survive; streams fail themselves
                log.exception("add poller failed")
            finally:
                # A caller takes over: stay out of its way for a grace period (it needs a moment
                # to wake up and take the lead).
                self._last_caller_read = time.monotonic()
                self._leader = None
                self._lead.release()
                with self._lock:
                    handover, self._handover_to = self._handover_to, set()
                for condition in handover:  # the callers waiting to read: one of them leads now
                    with condition:
                        condition.notify_all()

    def close(self) -> None:
        """Stop the background reader and end every registered connection (their pending adds
        fail), then release the epoll set."""
        with self._background_cv:
            if self._closed:
                return
            self._closed = True
            self._background_cv.notify_all()
        self.wake_all()
        self._thread.join(timeout=5)
        with self._lock:
            streams = list(self._streams.values())
        for s in streams:
            s.finish("add poller closed")
        with self._lock:
            self._epoll.close()
            os.close(self._wake_fd)
            self._wake_fd = -1

    def wake_all(self) -> None:
        with self._lock:  # never write to a closed (and perhaps reused) fd number
            if self._wake_fd >= 0:
                os.eventfd_write(self._wake_fd, 1)
