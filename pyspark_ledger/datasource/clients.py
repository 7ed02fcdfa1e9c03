"""The LedgerClient every piece of the data source that runs in a Spark Python worker uses: one
per worker process, not one per call.

Shared by the rooms (read/, write/, stream/): planning, reads, writes and commits all lease their
client here (`lease_client`). A client costs a metadata session (a ZooKeeper session: a TCP
connection, a handshake, a watch on the cluster settings) and gRPC channels to the bookies; Spark
calls the data source many times per query (every partition of every micro-batch, every
trigger's planning on the driver), so each Python worker process keeps a small bounded cache of
clients, keyed by

    (process id, metadata settings with their credentials)

PySpark forks its workers from a daemon, and a gRPC channel or a ZooKeeper connection must never
be used on both sides of a fork: the key carries the process id, a child forgets the parent's
clients without touching them (os.register_at_fork), and every lease checks the pid again.
A cached client is closed when it has been idle for IDLE_CLOSE_S (a daemon thread looks every
IDLE_CHECK_S), when the process exits (atexit), or when a lease of it failed with anything but a
user's mistake (the next lease opens a fresh one). At most CACHE_CLIENTS_MAX clients stay open;
beyond that a lease gets a client of its own, closed when the lease ends.

LEDGER_SPARK_CLIENT_CACHE=0 (as spark.executorEnv.LEDGER_SPARK_CLIENT_CACHE and in the driver's
environment) turns the cache off: every lease opens and closes its own client, as before.
LEDGER_SPARK_CLIENT_AUDIT_DIR=<dir> makes every process append one line to <dir>/<pid> per
metadata session it opens (how the tests count sessions across Spark's Python processes).
No pyspark here.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from metadata import MetadataError
from pyspark_ledger.datasource.errors import LedgerSourceError, LedgerUserError
from pyspark_ledger.datasource.worker_gc import freeze_worker_heap

if TYPE_CHECKING:
    from pyspark_ledger.client import LedgerClient
    from pyspark_ledger.datasource.options.source_options import LedgerSourceOptions

log = logging.getLogger(__name__)

CACHE_ENV = "LEDGER_SPARK_CLIENT_CACHE"
AUDIT_ENV = "LEDGER_SPARK_CLIENT_AUDIT_DIR"
# A worker reads or writes a handful of clusters at most; each open client holds a metadata
# session and bookie channels, so the cache stays small.
CACHE_CLIENTS_MAX = 4
# Spark reuses a worker for the next task within milliseconds; a worker idle for minutes gives
# its session back (ZooKeeper counts sessions per client address, maxClientCnxns).
IDLE_CLOSE_S = 120.0
IDLE_CHECK_S = 15.0
# The add timeout of every data source client (one client serves a task's reads and writes): task
# writers tolerate slow bookies longer than the client default, as with E == W there is no spare
# bookie and an add timeout fails the task. Nothing else of the data source adds entries.
ADD_TIMEOUT_S = 30.0


def cache_enabled() -> bool:
    return os.environ.get(CACHE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def open_client(opts: LedgerSourceOptions, *, add_timeout_s: float = ADD_TIMEOUT_S) -> LedgerClient:
    """A new client for this job's metadata service (the caller closes it); an unreachable store
    fails within its connect timeout with a message naming the option. Every client of the data
    source is made here, so this is also where a reused worker freezes what its imports made
    (worker_gc)."""
    from pyspark_ledger.client import LedgerClient

    freeze_worker_heap()

    try:
        client = LedgerClient(opts.metadata, add_timeout_s=add_timeout_s)
    except MetadataError as exc:
        raise LedgerSourceError(
            f"cannot reach the metadata service {opts.metadata_uri} (option metadataServiceUri): {exc}; "
            "check the address and that the service is running") from None
    _audit_session()
    return client


def _audit_session() -> None:
    where = os.environ.get(AUDIT_ENV)
    if where:
        with open(Path(where) / str(os.getpid()), "a", encoding="ascii") as f:
            f.write(f"{time.time():.3f}\n")


@dataclass
class _Entry:
    client: LedgerClient
    users: int = 0
    last_used: float = 0.0  # time.monotonic() when its last lease ended
    broken: bool = False  # a lease failed: closed when its last user is done, never lent again


class ClientCache:
    """A bounded cache of open clients for one process (module doc). Thread-safe: a client may be
    leased by several threads at once (a LedgerClient is); it is idle when nobody holds it."""

    def __init__(self, max_clients: int = CACHE_CLIENTS_MAX, idle_close_s: float = IDLE_CLOSE_S):
        assert max_clients >= 1 and idle_close_s > 0
        self.max_clients = max_clients
        self.idle_close_s = idle_close_s
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._entries: dict[Hashable, _Entry] = {}
        self._reaper: threading.Thread | None = None
        self._stop = threading.Event()

    def __len__(self) -> int:
        return len(self._entries)

    @contextlib.contextmanager
    def lease(self, key: Hashable, make: Callable[[], LedgerClient]) -> Iterator[LedgerClient]:
        """The cached client for `key` (made by `make()` when there is none), held until the with
        block ends. A failure inside the block other than a user's mistake retires the client."""
        entry = self._take(key, make)
        if entry is None:  # the cache is full of clients in use: one of our own
            with make() as client:
                yield client
            return
        try:
            yield entry.client
        except BaseException as exc:
            if not isinstance(exc, (LedgerUserError, GeneratorExit)):
                entry.broken = True
            raise
        finally:
            self._give_back(key, entry)

    def _take(self, key: Hashable, make: Callable[[], LedgerClient]) -> _Entry | None:
        with self._lock:
            if self._pid != os.getpid():
                self._forget_after_fork()
            entry = self._entries.get(key)
            if entry is not None and not entry.broken:
                entry.users += 1
                return entry
            if len(self._entries) >= self.max_clients and not self._evict_one():
                return None
        client = make()  # outside the lock: connecting takes a while and may fail
        with self._lock:
            if self._pid != os.getpid():  # forked while connecting: not ours to cache
                client.close()
                raise RuntimeError("the process forked while a client was being opened")
            entry = self._entries.get(key)
            if entry is not None and not entry.broken:  # another thread made one meanwhile
                stale, entry.users = client, entry.users + 1
            else:
                stale, entry = None, _Entry(client, users=1)
                self._entries[key] = entry
                self._start_reaper()
        if stale is not None:
            stale.close()
        return entry

    def _give_back(self, key: Hashable, entry: _Entry) -> None:
        to_close = None
        with self._lock:
            if self._pid != os.getpid():
                return
            entry.users -= 1
            assert entry.users >= 0, "a cached client given back more often than it was leased"
            if entry.users:
                return
            entry.last_used = time.monotonic()
            if entry.broken:
                if self._entries.get(key) is entry:
                    del self._entries[key]
                to_close = entry.client
        if to_close is not None:
            _close_quietly(to_close)
        else:
            try:
                entry.client.close_handles()  # this lease's ledger handles are done with
            except Exception:
                log.debug("closing a cached client's handles failed", exc_info=True)

    def _evict_one(self) -> bool:
        """Close the least recently used idle client (lock held); False if every one is in use."""
        idle = [(e.last_used, k) for k, e in self._entries.items() if e.users == 0]
        if not idle:
            return False
        _, key = min(idle)
        _close_quietly(self._entries.pop(key).client)
        return True

    def close_idle(self, now: float | None = None) -> int:
        """Close the clients idle for idle_close_s or longer; how many were closed."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if self._pid != os.getpid():
                return 0
            old = [k for k, e in self._entries.items() if e.users == 0 and now - e.last_used >= self.idle_close_s]
            clients = [self._entries.pop(k).client for k in old]
        for c in clients:
            _close_quietly(c)
        return len(clients)

    def close_all(self) -> None:
        """Close every cached client of this process (at exit); clients still leased are closed
        too: nothing runs after the interpreter's exit handlers."""
        with self._lock:
            if self._pid != os.getpid():
                return
            clients = [e.client for e in self._entries.values()]
            self._entries.clear()
            self._stop.set()
        for c in clients:
            _close_quietly(c)

    def _forget_after_fork(self) -> None:
        """In a forked child: drop the parent's clients without touching them (their sockets and
        threads belong to the parent) and start afresh."""
        self._pid = os.getpid()
        self._entries = {}
        self._reaper = None
        self._stop = threading.Event()

    def after_fork_in_child(self) -> None:
        self._lock = threading.Lock()  # the parent may have held it while forking
        self._forget_after_fork()

    def _start_reaper(self) -> None:
        if self._reaper is None:
            self._reaper = threading.Thread(target=self._reap, args=(self._stop,), name="ledger-client-cache",
                                            daemon=True)
            self._reaper.start()

    def _reap(self, stop: threading.Event) -> None:
        while not stop.wait(IDLE_CHECK_S):  # ends with the process (daemon) or close_all
            try:
                self.close_idle()
            except Exception:
                log.warning("closing idle ledger clients failed", exc_info=True)


def _close_quietly(client: LedgerClient) -> None:
    try:
        client.close()
    except Exception:
        log.debug("closing a ledger client failed", exc_info=True)


_CACHE = ClientCache()
atexit.register(_CACHE.close_all)
os.register_at_fork(after_in_child=_CACHE.after_fork_in_child)


@contextlib.contextmanager
def lease_client(opts: LedgerSourceOptions) -> Iterator[LedgerClient]:
    """This process's client for the job's metadata service, for the length of a with block:
    the cached one (module doc), or with LEDGER_SPARK_CLIENT_CACHE=0 a new one closed at the end."""
    if not cache_enabled():
        with open_client(opts) as client:
            yield client
        return
    key = (os.getpid(), opts.metadata.uri_with_secrets())  # credentials and TLS files included
    with _CACHE.lease(key, lambda: open_client(opts)) as client:
        yield client
