"""Value types and pure helpers of the storage engine (results, ledger state, waiters,
argument validation, entry locations)."""

from __future__ import annotations

import threading
from array import array
from dataclasses import dataclass
from itertools import accumulate, islice
from typing import Any

from bookie.status import Status
from bookie.storage import records
from bookie.storage.config import LEDGER_ID_MAX, MASTER_KEY_BYTES_MAX
from bookie.storage.ledger_index import pack_location
from bookie.storage.range_read import RangeRead

LedgerKey = tuple[int, int]


@dataclass(frozen=True, slots=True)
class ReadResult:
    entry_id: int
    status: Status  # OK, NO_SUCH_ENTRY, UNKNOWN_ENTRY_STATE (read_entry: also ledger statuses)
    data: bytes  # b"" unless OK


@dataclass(frozen=True)
class LedgerState:
    fenced: bool
    lac: int
    entry_count: int
    size_bytes: int
    has_master_key: bool


class _Waiter:
    """Completion of one synchronous journal write (fence, write_lac, delete)."""

    __slots__ = ("_event", "status")

    def __init__(self) -> None:
        self._event = threading.Event()
        self.status = Status.TIMEOUT

    def __call__(self, status: Status) -> None:
        self.status = status
        self._event.set()

    def wait(self, timeout_s: float) -> Status:
        return self.status if self._event.wait(timeout_s) else Status.TIMEOUT


class _LacWaiters:
    __slots__ = ("cond", "count")

    def __init__(self, lock: threading.Lock) -> None:
        self.cond = threading.Condition(lock)
        self.count = 0


def _valid_ledger(ledger: Any) -> bool:
    return (
        isinstance(ledger, tuple)
        and len(ledger) == 2
        and isinstance(ledger[0], int)
        and isinstance(ledger[1], int)
        and 0 <= ledger[0] <= LEDGER_ID_MAX
        and 0 <= ledger[1] <= LEDGER_ID_MAX
    )


def _normalize_key(master_key: Any) -> bytes | None:
    if not isinstance(master_key, (bytes, bytearray, memoryview)):
        return None
    key = bytes(master_key)
    return key if len(key) <= MASTER_KEY_BYTES_MAX else None


def _locations(log_id: int, region_offset: int,
               batch: records.EncodedBatch | records.DecodedBatch) -> array[int]:
    """Packed entry-log location of each entry of a batch written at region_offset."""
    # Entries are back to back: header k starts after headers and data of entries 0..k-1.
    # accumulate/map/islice run that running sum in C: this is the index's hot loop.
    steps = map(records.ENTRY_HEADER_BYTES.__add__, batch.lens)
    base = pack_location(log_id, region_offset)
    return array("q", islice(accumulate(steps, initial=base), len(batch.lens)))


def _results(answer: RangeRead) -> list[ReadResult]:
    """One ReadResult per id of a bulk answer, in id order (the per-entry form of a read)."""
    out: list[ReadResult] = [ReadResult(eid, status, b"") for eid, status in answer.others]
    for run in answer.runs:
        ends = list(accumulate(run.lengths, initial=0))
        data = run.data
        out.extend(ReadResult(run.first_entry_id + i, Status.OK, data[ends[i]:ends[i + 1]])
                   for i in range(run.count))
    out.sort(key=lambda r: r.entry_id)
    return out

