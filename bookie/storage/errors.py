"""Exception root of the storage engine and the `ensure` invariant helper."""

from __future__ import annotations

from pathlib import Path

from bookie.errors import BookieError


class StorageError(BookieError):
    """Root of every error the storage engine raises."""


class InvariantError(StorageError):
    """A broken invariant: a bug, never an expected condition to handle."""


class StorageLockedError(StorageError):
    """Another engine (process) already owns the data directory."""


class StorageClosedError(StorageError):
    """The engine was used after close()."""


class JournalCorruptionError(StorageError):
    """A journal record is damaged and valid records follow it (or the journal is otherwise
    inconsistent), so acknowledged data may be lost. Needs an operator."""

    def __init__(self, message: str, path: Path | None = None, offset: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.offset = offset


class CheckpointCorruptionError(StorageError):
    """A checkpoint file (manifest or ledger index file) fails its checksum or format check."""

    def __init__(self, message: str, path: Path | None = None) -> None:
        super().__init__(message)
        self.path = path


class RecordFormatError(StorageError):
    """A record passed its checksum but does not decode (version mismatch or a bug)."""


def ensure(condition: bool, message: str) -> None:
    """Check an invariant. Unlike `assert`, it survives `python -O`."""
    if not condition:
        raise InvariantError(message)
