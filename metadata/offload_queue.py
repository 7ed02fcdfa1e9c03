"""The offload file queue: every object an offload attempt writes is listed here first.

    /offload/files/<attempt>   JSON {"ledger": "<qualified name>", "store": "<uri>", "files": [names], "createdMs": t}

An attempt's node is created before the attempt's WRITING record and before any of its objects,
so no object the offloader writes is ever unknown to metadata (a crash at any step leaves at most
a node whose objects may or may not exist). The node goes only once its objects are deleted, or
stays while the ledger's OFFLOADED record names that attempt: it is then the entry that deletes
the ledger's files when the ledger is trimmed or its log deleted (pyspark_ledger/offload/queue_pass.py
decides, from the ledger's record, which nodes' objects may go). This is the deletion queue of
the offloaded files, as a log record's pending_deletions is for ledgers: crash-safe because the
decision is re-made from metadata on every pass.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from metadata.errors import CorruptMetadataError, InvalidMetadataError, NoNodeError
from metadata.ids import LedgerId
from metadata.paths import OFFLOAD_FILES
from metadata.store import MetadataStore, join

QUEUE_FILES_MAX = 64
_ATTEMPT_CHARS = set("0123456789abcdef")


@dataclass(frozen=True, slots=True)
class QueuedAttempt:
    attempt: str
    ledger_id: LedgerId
    store: str
    files: tuple[str, ...]
    created_ms: int

    def __post_init__(self) -> None:
        if not self.attempt or not set(self.attempt) <= _ATTEMPT_CHARS or len(self.attempt) > 64:
            raise InvalidMetadataError(f"offload attempt id {self.attempt!r} is not lower-case hex")
        if len(self.files) > QUEUE_FILES_MAX:
            raise InvalidMetadataError(f"an offload attempt writes at most {QUEUE_FILES_MAX} files")


def attempt_path(attempt: str) -> str:
    return join(OFFLOAD_FILES, attempt)


def _encode(q: QueuedAttempt) -> bytes:
    return json.dumps({"ledger": q.ledger_id.qualified_name, "store": q.store, "files": list(q.files),
                       "createdMs": q.created_ms}, sort_keys=True).encode()


def _decode(attempt: str, data: bytes) -> QueuedAttempt:
    try:
        d = json.loads(data)
        return QueuedAttempt(attempt, LedgerId.from_qualified_name(d["ledger"]), str(d["store"]),
                             tuple(str(f) for f in d["files"]), int(d["createdMs"]))
    except (ValueError, KeyError, TypeError, InvalidMetadataError) as exc:
        raise CorruptMetadataError(f"offload queue entry {attempt}: unreadable: {exc}") from exc


def enqueue(store: MetadataStore, q: QueuedAttempt) -> None:
    store.create(attempt_path(q.attempt), _encode(q))


def queued(store: MetadataStore, limit: int) -> Iterator[QueuedAttempt]:
    """Up to `limit` queued attempts (in attempt id order, which is random: a pass sees a fair share)."""
    for name in store.children(OFFLOAD_FILES)[:limit]:
        got = store.get(attempt_path(name))
        if got is not None:
            yield _decode(name, got.value)


def dequeue(store: MetadataStore, attempt: str) -> None:
    try:
        store.delete(attempt_path(attempt))
    except NoNodeError:
        pass  # somebody else finished it first
