"""LogManager: named log records in the metadata store, changed only by compare-and-set."""

from __future__ import annotations

from typing import Callable

from metadata import log_record
from metadata.errors import NodeExistsError, NoNodeError
from metadata.log_record import LogRecord
from metadata.paths import LOGS, check_name, log_path
from metadata.store import MetadataStore, RetryPolicy, Versioned, Watch, cas_update


class NoSuchLogError(NoNodeError):
    """The named log does not exist."""


class LogExistsError(NodeExistsError):
    """create() found a log of that name."""


class LogManager:
    def __init__(self, store: MetadataStore, retry: RetryPolicy | None = None):
        self.store = store
        self.retry = retry or RetryPolicy()

    def create(self, record: LogRecord) -> int:
        try:
            return self.store.create(log_path(record.name), log_record.encode(record))
        except NodeExistsError:
            raise LogExistsError(f"log {record.name!r} already exists") from None

    def read(self, name: str) -> tuple[LogRecord, int]:
        got = self.store.get(log_path(name))
        if got is None:
            raise NoSuchLogError(f"no such log {name!r}")
        return log_record.decode(got.value, name), got.version

    def get(self, name: str) -> tuple[LogRecord, int] | None:
        try:
            return self.read(name)
        except NoSuchLogError:
            return None

    def compare_and_set(self, record: LogRecord, expected_version: int) -> int:
        try:
            return self.store.compare_and_set(log_path(record.name), log_record.encode(record), expected_version)
        except NoNodeError:
            raise NoSuchLogError(f"no such log {record.name!r}") from None

    def update(self, name: str, change: Callable[[LogRecord], LogRecord | None]) -> tuple[LogRecord, int]:
        """CAS loop: `change` returns the new record, None for no change, or raises to give up."""
        return cas_update(lambda: self.read(name), self.compare_and_set, change, self.retry)

    def delete(self, name: str, expected_version: int | None = None) -> None:
        try:
            self.store.delete(log_path(name), expected_version)
        except NoNodeError:
            raise NoSuchLogError(f"no such log {name!r}") from None

    def names(self) -> list[str]:
        return self.store.children(LOGS)

    def watch(self, name: str, callback: Callable[[LogRecord | None, int], None]) -> Watch:
        check_name("log", name)

        def on_change(v: Versioned | None) -> None:
            callback(None, -1) if v is None else callback(log_record.decode(v.value, name), v.version)

        return self.store.watch(log_path(name), on_change)
