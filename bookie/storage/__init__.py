"""Durable storage engine of a bookie: journal with group commit, entry logs, in-memory index,
checkpoints. Stdlib, crc32c and numpy (bulk read verification) only; no gRPC, no client
imports."""

from bookie.status import Status
from bookie.storage.config import StorageConfig
from bookie.storage.engine import BookieStorage, LedgerState, ReadResult
from bookie.storage.errors import (
    CheckpointCorruptionError,
    InvariantError,
    JournalCorruptionError,
    StorageClosedError,
    StorageError,
    StorageLockedError,
    ensure,
)

__all__ = [
    "BookieStorage",
    "CheckpointCorruptionError",
    "InvariantError",
    "JournalCorruptionError",
    "LedgerState",
    "ReadResult",
    "Status",
    "StorageClosedError",
    "StorageConfig",
    "StorageError",
    "StorageLockedError",
    "ensure",
]
