"""The offload record of one ledger: where its sealed entries live in the object store.

Kept in the ledger's metadata custom map under OFFLOAD_KEY (older clients carry the custom map
through every compare-and-set unchanged), never in the log record, so it goes with the ledger.

    {"state": "WRITING" | "OFFLOADED", "attempt": "<uuid hex>", "store": "<uri without secrets>",
     "startedMs": t, "offloadedMs": t | null, "deleteBookiesAfterMs": t | null,
     "files": [{"name": "<object name relative to the store>", "sizeBytes": n, "crc32c": n,
                "entries": n, "messages": n}]}

WRITING names an attempt before any of its objects exists (its names are fixed up front), so a
crash leaves nothing unrecorded; OFFLOADED is set by the one compare-and-set that finishes the
attempt whose files were read back and verified. A record in another state (a newer release's)
is kept and treated as "not offloaded by this release": never read from, never overwritten.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from metadata.errors import CorruptMetadataError, InvalidMetadataError
from metadata.ledger import LedgerMetadata

OFFLOAD_KEY = "offload"
WRITING = "WRITING"
OFFLOADED = "OFFLOADED"
OFFLOAD_FILES_MAX = 64  # one file per ledger today; the bound keeps the custom value small


@dataclass(frozen=True, slots=True)
class OffloadedFile:
    name: str  # object name relative to the store's root
    size_bytes: int = 0
    crc32c: int = 0
    entries: int = 0
    messages: int = 0


@dataclass(frozen=True, slots=True)
class OffloadRecord:
    state: str
    attempt: str
    store: str
    started_ms: int
    files: tuple[OffloadedFile, ...] = ()
    offloaded_ms: int | None = None
    delete_bookies_after_ms: int | None = None  # None: the bookies keep their copies

    def __post_init__(self) -> None:
        if not self.attempt or not self.store:
            raise InvalidMetadataError("an offload record names its attempt and its store")
        if len(self.files) > OFFLOAD_FILES_MAX:
            raise InvalidMetadataError(f"an offload record lists at most {OFFLOAD_FILES_MAX} files")

    @property
    def offloaded(self) -> bool:
        return self.state == OFFLOADED

    @property
    def size_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    def finished(self, files: tuple[OffloadedFile, ...], now_ms: int, delete_after_ms: int | None) -> OffloadRecord:
        """The OFFLOADED record of this attempt (its files verified)."""
        if self.state != WRITING:
            raise InvalidMetadataError(f"offload attempt {self.attempt}: cannot finish a record in state {self.state}")
        if [f.name for f in files] != [f.name for f in self.files]:
            raise InvalidMetadataError(f"offload attempt {self.attempt}: finished files differ from the announced ones")
        after = None if delete_after_ms is None else now_ms + delete_after_ms
        return replace(self, state=OFFLOADED, files=files, offloaded_ms=now_ms, delete_bookies_after_ms=after)

    def bookie_copies_deletable(self, now_ms: int) -> bool:
        """Whether the bookies may drop their copies (offloaded, and the grace has passed)."""
        return self.offloaded and self.delete_bookies_after_ms is not None and now_ms >= self.delete_bookies_after_ms

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "attempt": self.attempt, "store": self.store, "startedMs": self.started_ms,
                "offloadedMs": self.offloaded_ms, "deleteBookiesAfterMs": self.delete_bookies_after_ms,
                "files": [{"name": f.name, "sizeBytes": f.size_bytes, "crc32c": f.crc32c, "entries": f.entries,
                           "messages": f.messages} for f in self.files]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> OffloadRecord:
        files = tuple(OffloadedFile(str(f["name"]), int(f.get("sizeBytes", 0)), int(f.get("crc32c", 0)),
                                    int(f.get("entries", 0)), int(f.get("messages", 0))) for f in d.get("files", []))
        after = d.get("deleteBookiesAfterMs")
        done = d.get("offloadedMs")
        return cls(str(d["state"]), str(d["attempt"]), str(d["store"]), int(d["startedMs"]), files,
                   None if done is None else int(done), None if after is None else int(after))


def encode_record(rec: OffloadRecord) -> bytes:
    return json.dumps(rec.to_json(), sort_keys=True, separators=(",", ":")).encode()


def offload_record(meta: LedgerMetadata) -> OffloadRecord | None:
    """The ledger's offload record, or None. A damaged record raises CorruptMetadataError."""
    raw = meta.custom.get(OFFLOAD_KEY)
    if raw is None:
        return None
    try:
        return OffloadRecord.from_json(json.loads(bytes(raw)))
    except (ValueError, KeyError, TypeError, InvalidMetadataError) as exc:
        raise CorruptMetadataError(f"ledger {meta.ledger_id}: unreadable offload record: {exc}") from exc


def is_offloaded(meta: LedgerMetadata) -> bool:
    """Whether reads of this ledger come from the object store (and its bookies may hold nothing).
    An unreadable record says no: readers then use the bookies, GC keeps their copies, and the
    auditor keeps watching them (what the ledger was before any offload)."""
    try:
        rec = offload_record(meta)
    except CorruptMetadataError:
        return False
    return rec is not None and rec.offloaded


def with_record(meta: LedgerMetadata, rec: OffloadRecord | None) -> LedgerMetadata:
    return meta.with_custom(OFFLOAD_KEY, None if rec is None else encode_record(rec))
