"""EmbeddedStore: the metadata store for one machine, in a SQLite file (stdlib sqlite3, WAL mode).

Many processes may open the same file at once (Spark executors are separate processes): every write
is one `BEGIN IMMEDIATE` transaction, so compare-and-set is exactly as strict as ZooKeeper's.
Ephemeral registrations carry an expiry time that their owner's heartbeat thread pushes forward;
once the heartbeat stops (the owner died), the row counts as absent after its TTL. Watches are
served by one poller thread per store that re-reads watched paths every `poll_ms`.
"""

from __future__ import annotations

import logging
import os
import random
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metadata.errors import (
    BadVersionError,
    IdAllocationError,
    MetadataError,
    MetadataUnavailableError,
    NodeExistsError,
    NoNodeError,
)
from metadata.owner_only import create_owner_only
from metadata.paths import counter_path
from metadata.store import (
    ChildrenCallback,
    DataCallback,
    MetadataStore,
    Versioned,
    check_path,
    parent_of,
)

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
DEFAULT_TTL_MS = 10_000
DEFAULT_POLL_MS = 100
# How long a writer waits for another process's transaction before giving up.
BUSY_TIMEOUT_MS = 10_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    path TEXT PRIMARY KEY,
    parent TEXT NOT NULL,
    value BLOB NOT NULL,
    version INTEGER NOT NULL,
    cseq INTEGER NOT NULL,        -- creation sequence: a re-created node is a different node
    owner TEXT,                   -- ephemeral owner, NULL for persistent nodes
    expires_at REAL               -- ephemeral expiry (unix seconds), NULL for persistent nodes
);
CREATE INDEX IF NOT EXISTS nodes_parent ON nodes(parent);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS store_info (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

# A row counts only if it is persistent or its ephemeral lease is still running.
_LIVE = "(expires_at IS NULL OR expires_at > ?)"


@dataclass
class _DataWatch:
    path: str
    callback: DataCallback
    last: tuple[int, int] | None  # (cseq, version) last reported
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class _ChildrenWatch:
    path: str
    callback: ChildrenCallback
    last: list[tuple[str, int]] | None
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


class _SqliteRegistration:
    """An ephemeral row kept alive by a heartbeat thread; re-created if it lapsed during a stall."""

    def __init__(self, store: EmbeddedStore, path: str, value: bytes, replace_if: Callable[[bytes], bool] | None):
        self.path = path
        self._store = store
        self._value = value
        self._owner = uuid.uuid4().hex
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._store._put_ephemeral(path, value, self._owner, fail_if_other_owner=True, replace_if=replace_if)
        self._refreshed_at = time.monotonic()
        self._thread = threading.Thread(target=self._heartbeat, name=f"heartbeat {path}", daemon=True)
        self._thread.start()

    def _heartbeat(self) -> None:
        interval_s = self._store.ttl_ms / 3000.0
        while not self._closed.wait(interval_s):
            try:
                with self._lock:
                    if not self._closed.is_set():
                        self._store._put_ephemeral(self.path, self._value, self._owner, fail_if_other_owner=False,
                                                   refresh_only=True)
                        self._refreshed_at = time.monotonic()
            except MetadataError as exc:
                log.warning("registration heartbeat failed path=%s error=%s", self.path, exc)
            except sqlite3.Error as exc:
                log.warning("registration heartbeat failed path=%s error=%s", self.path, exc)

    @property
    def registered(self) -> bool:
        """False once heartbeats have failed for a TTL: the row may have lapsed (and be re-created
        by the next successful heartbeat)."""
        return not self._closed.is_set() and time.monotonic() - self._refreshed_at < self._store.ttl_ms / 1000.0

    def update(self, value: bytes) -> None:
        with self._lock:
            self._value = value
            self._store._put_ephemeral(self.path, value, self._owner, fail_if_other_owner=False, recreate=True)
            self._refreshed_at = time.monotonic()

    def close(self) -> None:
        with self._lock:
            if self._closed.is_set():
                return
            self._closed.set()
            self._store._drop_ephemeral(self.path, self._owner)
        self._thread.join(timeout=5)


class EmbeddedStore(MetadataStore):
    def __init__(self, db_path: str | Path, *, ttl_ms: int = DEFAULT_TTL_MS, poll_ms: int = DEFAULT_POLL_MS,
                 uri: str | None = None):
        self.db_path = Path(db_path)
        self.ttl_ms = ttl_ms
        self.poll_ms = poll_ms
        self.uri = uri or f"sqlite://{self.db_path}"
        if not self.db_path.is_absolute():
            raise MetadataUnavailableError(f"embedded store path must be absolute: {self.db_path}")
        if not self.db_path.parent.is_dir():
            raise MetadataUnavailableError(
                f"cannot open embedded metadata store {self.db_path}: directory {self.db_path.parent} does not exist"
            )
        self._local = threading.local()
        self._closed = False
        self._watch_lock = threading.Lock()
        self._watches: list[_DataWatch | _ChildrenWatch] = []
        self._registrations: list[_SqliteRegistration] = []
        self._poller: threading.Thread | None = None
        self._poller_stop = threading.Event()
        self._all_conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        try:
            create_owner_only(self.db_path)
            self._conn()
        except (sqlite3.Error, OSError) as exc:
            raise MetadataUnavailableError(f"cannot open embedded metadata store {self.db_path}: {exc}") from exc

    # ---- connections and transactions ---------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        if self._closed:
            raise MetadataError(f"metadata store {self.uri} is closed")
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect_with_retry()
            self._local.conn = conn
            with self._conns_lock:
                self._all_conns.append(conn)
        return conn

    def _connect_with_retry(self) -> sqlite3.Connection:
        """Open and prepare a connection. Switching a new file to WAL and creating the schema can
        meet "database is locked" while other processes do the same (SQLite does not apply the
        busy timeout there), so retry, bounded by BUSY_TIMEOUT_MS."""
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while True:
            conn = None
            try:
                # One connection per thread; check_same_thread=False only so close() may close them all.
                conn = sqlite3.connect(
                    str(self.db_path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
                )
                conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
                conn.execute("PRAGMA journal_mode=WAL")
                # Metadata is small and must survive power loss: fsync every commit.
                conn.execute("PRAGMA synchronous=FULL")
                conn.executescript(_SCHEMA)
                conn.execute(
                    "INSERT OR IGNORE INTO store_info(key, value) VALUES('schema_version', ?)", (str(SCHEMA_VERSION),)
                )
                row = conn.execute("SELECT value FROM store_info WHERE key='schema_version'").fetchone()
                if int(row[0]) > SCHEMA_VERSION:
                    raise MetadataError(
                        f"embedded store {self.db_path} has schema version {row[0]}, newer than this code ({SCHEMA_VERSION})"
                    )
                return conn
            except sqlite3.OperationalError as exc:
                if conn is not None:
                    conn.close()
                if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() > deadline:
                    raise
                time.sleep(random.uniform(0.005, 0.05))

    class _Txn:
        def __init__(self, conn: sqlite3.Connection):
            self.conn = conn

        def __enter__(self) -> sqlite3.Connection:
            self.conn.execute("BEGIN IMMEDIATE")
            return self.conn

        def __exit__(self, exc_type: Any, *rest: Any) -> None:
            if exc_type is None:
                self.conn.execute("COMMIT")
            else:
                self.conn.execute("ROLLBACK")

    def _write(self, conn: sqlite3.Connection) -> _Txn:
        return EmbeddedStore._Txn(conn)

    def _run(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        try:
            return fn(self._conn())
        except sqlite3.OperationalError as exc:
            raise MetadataUnavailableError(f"embedded metadata store {self.db_path}: {exc}") from exc

    # ---- helpers inside a transaction ---------------------------------------------------------

    @staticmethod
    def _next_cseq(conn: sqlite3.Connection) -> int:
        conn.execute("INSERT OR IGNORE INTO counters(name, value) VALUES('__cseq', 0)")
        conn.execute("UPDATE counters SET value = value + 1 WHERE name='__cseq'")
        return int(conn.execute("SELECT value FROM counters WHERE name='__cseq'").fetchone()[0])

    def _purge_expired(self, conn: sqlite3.Connection, path: str) -> None:
        conn.execute("DELETE FROM nodes WHERE path=? AND expires_at IS NOT NULL AND expires_at <= ?", (path, time.time()))

    def _make_parents(self, conn: sqlite3.Connection, path: str) -> None:
        missing = []
        p = parent_of(path)
        while p != "/":
            if conn.execute("SELECT 1 FROM nodes WHERE path=?", (p,)).fetchone():
                break
            missing.append(p)
            p = parent_of(p)
        for p in reversed(missing):
            conn.execute(
                "INSERT INTO nodes(path, parent, value, version, cseq) VALUES(?,?,?,0,?)",
                (p, parent_of(p), b"", self._next_cseq(conn)),
            )

    # ---- MetadataStore ------------------------------------------------------------------------

    def create(self, path: str, value: bytes) -> int:
        check_path(path)

        def op(conn: sqlite3.Connection) -> int:
            with self._write(conn):
                self._purge_expired(conn, path)
                if conn.execute("SELECT 1 FROM nodes WHERE path=?", (path,)).fetchone():
                    raise NodeExistsError(f"metadata already exists at {path}")
                self._make_parents(conn, path)
                conn.execute(
                    "INSERT INTO nodes(path, parent, value, version, cseq) VALUES(?,?,?,0,?)",
                    (path, parent_of(path), bytes(value), self._next_cseq(conn)),
                )
            return 0

        return self._run(op)

    def get(self, path: str) -> Versioned | None:
        check_path(path)

        def op(conn: sqlite3.Connection) -> Versioned | None:
            row = conn.execute(
                f"SELECT value, version FROM nodes WHERE path=? AND {_LIVE}", (path, time.time())
            ).fetchone()
            return None if row is None else Versioned(bytes(row[0]), int(row[1]))

        return self._run(op)

    def compare_and_set(self, path: str, value: bytes, expected_version: int) -> int:
        check_path(path)

        def op(conn: sqlite3.Connection) -> int:
            with self._write(conn):
                self._purge_expired(conn, path)
                row = conn.execute("SELECT version FROM nodes WHERE path=?", (path,)).fetchone()
                if row is None:
                    raise NoNodeError(f"no metadata at {path}")
                if int(row[0]) != expected_version:
                    raise BadVersionError(path, expected_version, int(row[0]))
                conn.execute("UPDATE nodes SET value=?, version=version+1 WHERE path=?", (bytes(value), path))
                return expected_version + 1

        return self._run(op)

    def delete(self, path: str, expected_version: int | None = None) -> None:
        check_path(path)

        def op(conn: sqlite3.Connection) -> None:
            with self._write(conn):
                self._purge_expired(conn, path)
                row = conn.execute("SELECT version FROM nodes WHERE path=?", (path,)).fetchone()
                if row is None:
                    raise NoNodeError(f"no metadata at {path}")
                if expected_version is not None and int(row[0]) != expected_version:
                    raise BadVersionError(path, expected_version, int(row[0]))
                if conn.execute(
                    f"SELECT 1 FROM nodes WHERE parent=? AND {_LIVE} LIMIT 1", (path, time.time())
                ).fetchone():
                    raise MetadataError(f"cannot delete {path}: it has children")
                conn.execute("DELETE FROM nodes WHERE path=?", (path,))

        self._run(op)

    def children(self, path: str) -> list[str]:
        check_path(path)
        return [name for name, _ in self._children_with_cseq(path)]

    def _children_with_cseq(self, path: str) -> list[tuple[str, int]]:
        def op(conn: sqlite3.Connection) -> list[tuple[str, int]]:
            rows = conn.execute(
                f"SELECT path, cseq FROM nodes WHERE parent=? AND path != '/' AND {_LIVE} ORDER BY path",
                (path, time.time()),
            ).fetchall()
            return [(p.rsplit("/", 1)[1], int(c)) for p, c in rows]

        return self._run(op)

    def _cseq_version(self, path: str) -> tuple[Versioned, tuple[int, int]] | None:
        def op(conn: sqlite3.Connection) -> tuple[Versioned, tuple[int, int]] | None:
            row = conn.execute(
                f"SELECT value, version, cseq FROM nodes WHERE path=? AND {_LIVE}", (path, time.time())
            ).fetchone()
            if row is None:
                return None
            return Versioned(bytes(row[0]), int(row[1])), (int(row[2]), int(row[1]))

        return self._run(op)

    def allocate_id(self, counter: str = "ledgers") -> int:
        name = counter_path(counter)

        def op(conn: sqlite3.Connection) -> int:
            with self._write(conn):
                conn.execute("INSERT OR IGNORE INTO counters(name, value) VALUES(?, 0)", (name,))
                conn.execute("UPDATE counters SET value = value + 1 WHERE name=?", (name,))
                return int(conn.execute("SELECT value FROM counters WHERE name=?", (name,)).fetchone()[0])

        try:
            return self._run(op)
        except MetadataUnavailableError as exc:
            raise IdAllocationError(f"id allocation for {counter} failed: {exc}") from exc

    def sync(self, path: str) -> None:
        check_path(path)  # one SQLite file: every read already sees every committed write

    # ---- ephemeral registrations --------------------------------------------------------------

    def register_ephemeral(
        self, path: str, value: bytes, replace_if: Callable[[bytes], bool] | None = None
    ) -> _SqliteRegistration:
        check_path(path)
        reg = _SqliteRegistration(self, path, value, replace_if)
        with self._watch_lock:
            self._registrations.append(reg)
        return reg

    def _put_ephemeral(
        self, path: str, value: bytes, owner: str, *, fail_if_other_owner: bool,
        refresh_only: bool = False, recreate: bool = False, replace_if: Callable[[bytes], bool] | None = None,
    ) -> None:
        expires = time.time() + self.ttl_ms / 1000.0

        def op(conn: sqlite3.Connection) -> None:
            with self._write(conn):
                self._purge_expired(conn, path)
                row = conn.execute("SELECT owner, value FROM nodes WHERE path=?", (path,)).fetchone()
                if row is not None and row[0] != owner and row[0] is not None and replace_if and replace_if(bytes(row[1])):
                    log.info("replacing a stale registration of the same identity path=%s", path)
                    conn.execute("DELETE FROM nodes WHERE path=?", (path,))
                    row = None
                if row is not None and row[0] != owner:
                    if fail_if_other_owner or row[0] is None:
                        raise NodeExistsError(f"{path} is registered by another live owner")
                    log.warning("registration taken over by another owner path=%s", path)
                    return
                if row is not None and refresh_only:
                    conn.execute("UPDATE nodes SET expires_at=? WHERE path=?", (expires, path))
                    return
                if row is not None:
                    conn.execute("DELETE FROM nodes WHERE path=?", (path,))
                elif refresh_only:
                    log.warning("registration lapsed (heartbeat stalled past the TTL); re-registering path=%s", path)
                self._make_parents(conn, path)
                conn.execute(
                    "INSERT INTO nodes(path, parent, value, version, cseq, owner, expires_at) VALUES(?,?,?,0,?,?,?)",
                    (path, parent_of(path), bytes(value), self._next_cseq(conn), owner, expires),
                )

        self._run(op)

    def _drop_ephemeral(self, path: str, owner: str) -> None:
        def op(conn: sqlite3.Connection) -> None:
            with self._write(conn):
                conn.execute("DELETE FROM nodes WHERE path=? AND owner=?", (path, owner))

        try:
            self._run(op)
        except MetadataError as exc:
            log.warning("could not remove registration path=%s error=%s", path, exc)

    # ---- watches ------------------------------------------------------------------------------

    def watch(self, path: str, callback: DataCallback) -> _DataWatch:
        check_path(path)
        current = self._cseq_version(path)
        w = _DataWatch(path, callback, None if current is None else current[1])
        callback(None if current is None else current[0])
        self._add_watch(w)
        return w

    def watch_children(self, path: str, callback: ChildrenCallback) -> _ChildrenWatch:
        check_path(path)
        current = self._children_with_cseq(path)
        w = _ChildrenWatch(path, callback, current)
        callback([n for n, _ in current])
        self._add_watch(w)
        return w

    def _add_watch(self, w: _DataWatch | _ChildrenWatch) -> None:
        with self._watch_lock:
            self._watches.append(w)
            if self._poller is None:
                self._poller = threading.Thread(target=self._poll_loop, name="sqlite-store-watch", daemon=True)
                self._poller.start()

    def _poll_loop(self) -> None:
        while not self._poller_stop.wait(self.poll_ms / 1000.0):
            with self._watch_lock:
                self._watches = [w for w in self._watches if not w.cancelled]
                watches = list(self._watches)
            for w in watches:
                try:
                    self._poll_one(w)
                except Exception:  # a bad callback must not kill every other watch
                    log.exception("metadata watch callback failed path=%s", w.path)

    def _poll_one(self, w: _DataWatch | _ChildrenWatch) -> None:
        if isinstance(w, _DataWatch):
            current = self._cseq_version(w.path)
            key = None if current is None else current[1]
            if key != w.last and not w.cancelled:
                w.last = key
                w.callback(None if current is None else current[0])
        else:
            kids = self._children_with_cseq(w.path)
            if kids != w.last and not w.cancelled:
                w.last = kids
                w.callback([n for n, _ in kids])

    def close(self) -> None:
        if self._closed:
            return
        with self._watch_lock:
            regs = list(self._registrations)
        for reg in regs:
            reg.close()
        self._poller_stop.set()
        if self._poller is not None and self._poller is not threading.current_thread():
            self._poller.join(timeout=5)
        self._closed = True
        with self._conns_lock:
            for conn in self._all_conns:
                try:
                    conn.close()
                except sqlite3.Error:
                    pass
            self._all_conns.clear()


def embedded_path_from_env_default() -> Path:
    """The quickstart's default store location."""
    base = os.environ.get("PYSPARK_LEDGER_HOME") or os.path.join(os.path.expanduser("~"), ".pyspark-ledger")
    return Path(base) / "metadata.db"
