"""What the write handle sends and hears per bookie: its entries cut into add batches that fit a
transport message, and one bookie's answer to one batch (a refused run's durable prefix included).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from operator import attrgetter
from typing import Protocol, TypeVar

from bookie.status import Status
from pyspark_ledger.protocol.distribution import byte_bounded_chunks

BATCH_ENTRIES_MAX = 2_000
BATCH_BYTES_MAX = 4 * 2**20


class Encoded(Protocol):
    @property
    def data(self) -> bytes: ...


E = TypeVar("E", bound=Encoded)
_data_of = attrgetter("data")


def batches(entries: list[E]) -> Iterator[list[E]]:
    """Consecutive runs of at most BATCH_ENTRIES_MAX entries and (past the first entry)
    BATCH_BYTES_MAX encoded bytes: one add batch each, well inside a transport message."""
    if not entries:
        return
    if len(entries) <= BATCH_ENTRIES_MAX and sum(map(len, map(_data_of, entries))) <= BATCH_BYTES_MAX:
        yield entries  # the common case, checked with C-level loops
        return
    yield from byte_bounded_chunks(entries, _encoded_size, BATCH_ENTRIES_MAX, BATCH_BYTES_MAX)


def _encoded_size(p: Encoded) -> int:
    return len(p.data)


# What the write handle does with an answer: (bookie, entry ids, status, message).
OnBatch = Callable[[str, Sequence[int], Status, str], None]


class BatchAnswer:
    """One bookie's answer to one batch, handed to the write handle (`on_batch`). A run the bookie
    refused from one of its entries on (wire version 2) comes with the count of entries before it
    that are durable all the same (`on_stored`, before the answer): those count as acks, the
    refusal fails the rest."""

    __slots__ = ("on_batch", "bookie_id", "ids", "stored")

    def __init__(self, on_batch: OnBatch, bookie_id: str, ids: tuple[int, ...]):
        self.on_batch, self.bookie_id, self.ids, self.stored = on_batch, bookie_id, ids, 0

    def on_stored(self, count: int) -> None:
        self.stored = min(count, len(self.ids))

    def __call__(self, status: Status, message: str) -> None:
        ids, stored = self.ids, self.stored
        if stored and status != Status.OK:
            self.on_batch(self.bookie_id, ids[:stored], Status.OK, "")
            ids = ids[stored:]
        self.on_batch(self.bookie_id, ids, status, message)
