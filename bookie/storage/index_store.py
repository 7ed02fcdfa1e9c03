"""One embedded index store per bookie: every ledger's checkpointed state in one SQLite file.

Why: with one file per ledger (the first design), a bookie holding 100,000 ledgers kept
100,000 files, a checkpoint synced each one (a clean stop took 47 s, and the checkpoint that
ends a restart after a crash 38 s: bench/index_scale_bench.py), and every open listed and read
them all. BookKeeper's answer is one embedded key-value store per bookie (RocksDB in
DbLedgerStorage). SQLite is that store here: in the standard library (no new dependency, no
native build), transactional, crash-safe with its WAL, kept by the most careful maintainers of
any embedded database; a checkpoint writes all its dirty ledgers in one transaction and one
sync.

Rows: key = 16 bytes (scope, ledger as big-endian u64, so rows sort like LedgerIds), body = the
ledger's snapshot exactly as checkpoint.encode_ledger makes it plus its crc32c. SQLite does not
checksum pages, so the crc still tells a damaged row from a good one.

Upgrade: a data directory written with per-ledger files (`ledgers/*.ldg`) is migrated on open:
every file goes into the store in one transaction, and the files are deleted only after it
committed. A crash in between leaves files whose rows are already identical in the store (no
checkpoint runs before the migration finished), so migrating them again changes nothing.
"""

from __future__ import annotations

import sqlite3
import struct
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

STORE_NAME = "index.sqlite"
_KEY = struct.Struct(">QQ")
# Rows fetched per round trip when loading: bounded memory for the cursor, whatever the count.
LOAD_BATCH_ROWS = 4096


def encode_key(key: tuple[int, int]) -> bytes:
    return _KEY.pack(*key)


def decode_key(raw: bytes) -> tuple[int, int]:
    scope, ledger = _KEY.unpack(raw)
    return scope, ledger


class IndexStore:
    """The bookie's ledger rows. Calls are serialized by the store's own lock (the engine calls
    it from the checkpoint path and at open)."""

    def __init__(self, directory: Path, fsync: bool):
        self.path = directory / STORE_NAME
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        # WAL: a commit is one append + sync of the log; FULL syncs at every commit (the
        # checkpoint manifest is written only after the rows are durable). Without fsync (tests,
        # benchmarks) nothing is synced, like the engine's other files.
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={'FULL' if fsync else 'OFF'}")
        self._db.execute("CREATE TABLE IF NOT EXISTS ledgers (key BLOB PRIMARY KEY, body BLOB NOT NULL) WITHOUT ROWID")

    def put_many(self, rows: Iterable[tuple[tuple[int, int], bytes]]) -> int:
        """Insert or replace rows in one transaction (durable when it returns); how many. Rows
        are consumed lazily, so a checkpoint of many ledgers holds no second copy of them."""
        written = 0

        def items() -> Iterator[tuple[bytes, bytes]]:
            nonlocal written
            for key, body in rows:
                written += 1
                yield encode_key(key), body

        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany("INSERT OR REPLACE INTO ledgers (key, body) VALUES (?, ?)", items())
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return written

    def delete_many(self, keys: Iterable[tuple[int, int]]) -> int:
        """Remove rows in one transaction (durable when it returns); how many were asked."""
        items = [(encode_key(key),) for key in keys]
        if not items:
            return 0
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany("DELETE FROM ledgers WHERE key = ?", items)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return len(items)

    def rows(self) -> Iterator[tuple[tuple[int, int], bytes]]:
        """Every row, in key order, fetched in bounded batches. The store's lock is held until
        the iteration ends: consume it before calling the store again (the engine loads at open)."""
        with self._lock:
            cursor = self._db.execute("SELECT key, body FROM ledgers ORDER BY key")
            while True:
                batch = cursor.fetchmany(LOAD_BATCH_ROWS)
                if not batch:
                    return
                for raw_key, body in batch:
                    yield decode_key(bytes(raw_key)), bytes(body)

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM ledgers").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
