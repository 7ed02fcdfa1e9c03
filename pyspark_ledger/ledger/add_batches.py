"""What the write handle sends and hears per bookie: its entries cut into add batches that fit a
transport message, and one bookie's answer to one batch (a refused run's durable prefix included).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from itertools import chain, repeat
from operator import attrgetter, itemgetter
from typing import Protocol

from bookie.status import Status
from pyspark_ledger.protocol.invariants import ensure

BATCH_ENTRIES_MAX = 2_000
BATCH_BYTES_MAX = 4 * 2**20


class EncodedRun(Protocol):
    """What batching needs of a write handle's pending run: its first id, its encoded entries
    and the LAC they carry."""

    @property
    def entry_id(self) -> int: ...

    @property
    def datas(self) -> list[bytes]: ...

    @property
    def lac(self) -> int: ...

    @property
    def count(self) -> int: ...


# One add batch as columns: entry ids (ascending), the LAC each carries, the encoded entries.
Columns = tuple[Sequence[int], list[int], list[bytes]]


def batches(segments: Sequence[tuple[EncodedRun, int, int]]) -> Iterator[Columns]:
    """The entries of `segments` ((run, first id, last id), ascending, as WriterMachine.sends
    hands them out) as consecutive add batches of at most BATCH_ENTRIES_MAX entries and (past
    the first entry) BATCH_BYTES_MAX encoded bytes: each well inside a transport message. A run
    costs a slice and a few C-level calls, not a step per entry."""
    if len(segments) == 1:  # the common case for a run: one segment, checked with C-level loops
        p, first, last = segments[0]
        datas = _slice(p, first, last)
        if len(datas) <= BATCH_ENTRIES_MAX and sum(map(len, datas)) <= BATCH_BYTES_MAX:
            yield range(first, last + 1), [p.lac] * len(datas), datas
            return
    # Gather the columns, then cut only if they pass a bound (checked with C-level loops).
    ids, lacs, out = _columns(segments)
    if len(out) <= BATCH_ENTRIES_MAX and sum(map(len, out)) <= BATCH_BYTES_MAX:
        if out:
            yield ids, lacs, out
        return
    start, size = 0, 0
    for i, data in enumerate(out):
        n = len(data)
        if i > start and (i - start >= BATCH_ENTRIES_MAX or size + n > BATCH_BYTES_MAX):
            yield ids[start:i], lacs[start:i], out[start:i]
            start, size = i, 0
        size += n
    yield ids[start:], lacs[start:], out[start:]


def _columns(segments: Sequence[tuple[EncodedRun, int, int]]) -> tuple[list[int], list[int], list[bytes]]:
    """The segments' entries as three columns. Single adds only (the unbatched producer's case,
    every segment a whole run of one): C-level maps; otherwise a step per segment."""
    runs = list(map(_run_of, segments))
    if sum(map(_count_of, runs)) == len(runs):
        return (list(map(_entry_id_of, runs)), list(map(_lac_of, runs)),
                list(chain.from_iterable(map(_datas_of, runs))))
    ids: list[int] = []
    lacs: list[int] = []
    out: list[bytes] = []
    for p, first, last in segments:
        datas = _slice(p, first, last)
        ids.extend(range(first, last + 1))
        lacs.extend(repeat(p.lac, len(datas)))
        out.extend(datas)
    return ids, lacs, out


_run_of = itemgetter(0)
_count_of = attrgetter("count")
_entry_id_of = attrgetter("entry_id")
_lac_of = attrgetter("lac")
_datas_of = attrgetter("datas")


def _slice(p: EncodedRun, first: int, last: int) -> list[bytes]:
    off = first - p.entry_id
    datas = p.datas
    ensure(0 <= off <= last - p.entry_id < len(datas), "a segment lies inside its run")
    return datas if off == 0 and last - first + 1 == len(datas) else datas[off:off + last - first + 1]


# What the write handle does with an answer: (bookie, entry ids, status, message).
OnBatch = Callable[[str, Sequence[int], Status, str], None]


class BatchAnswer:
    """One bookie's answer to one batch, handed to the write handle (`on_batch`). A run the bookie
    refused from one of its entries on (wire version 2) comes with the count of entries before it
    that are durable all the same (`on_stored`, before the answer): those count as acks, the
    refusal fails the rest."""

    __slots__ = ("on_batch", "bookie_id", "ids", "stored")

    def __init__(self, on_batch: OnBatch, bookie_id: str, ids: Sequence[int]):
        self.on_batch, self.bookie_id, self.ids, self.stored = on_batch, bookie_id, ids, 0

    def on_stored(self, count: int) -> None:
        self.stored = min(count, len(self.ids))

    def __call__(self, status: Status, message: str) -> None:
        ids, stored = self.ids, self.stored
        if stored and status != Status.OK:
            self.on_batch(self.bookie_id, ids[:stored], Status.OK, "")
            ids = ids[stored:]
        self.on_batch(self.bookie_id, ids, status, message)
