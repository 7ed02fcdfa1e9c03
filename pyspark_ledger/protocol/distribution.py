"""The distribution schedule and the quorum checks built on it (reference/bookkeeper-protocol.md).

Entry e of a fragment goes to the W bookies of its ensemble starting at index e mod E. Two
quorums follow from A (the ack quorum):
- the replication quorum: A acks of an entry's write set make the add durable;
- the recovery quorum: W-A+1 answers of a write set make fencing, a LAC read or "no such entry"
  conclusive, because any recovery quorum shares at least one bookie with any replication quorum
  of the same write set (A + (W-A+1) > W).
Fencing, LAC reads and recovery's "is this entry absent?" all ask the same question, so it is
answered here once.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import TypeVar

from metadata.quorum import write_set as write_set_indexes

__all__ = [
    "ack_quorum_reachable",
    "byte_bounded_chunks",
    "covers_every_write_set",
    "entry_absent",
    "recovery_quorum",
    "write_set_indexes",
    "write_set_of",
    "write_sets",
]

T = TypeVar("T")


def recovery_quorum(write_quorum_size: int, ack_quorum_size: int) -> int:
    """Answers per write set that make a negative conclusive: W - A + 1."""
    return write_quorum_size - ack_quorum_size + 1


def write_set_of(entry_id: int, ensemble: Sequence[str], write_quorum_size: int) -> tuple[str, ...]:
    """The bookies that store `entry_id` in a fragment whose ensemble is `ensemble`."""
    return tuple(ensemble[i] for i in write_set_indexes(entry_id, len(ensemble), write_quorum_size))


def write_sets(ensemble: Sequence[str], write_quorum_size: int) -> tuple[tuple[str, ...], ...]:
    """The E distinct write sets of an ensemble; entry e uses number e mod E."""
    return tuple(write_set_of(start, ensemble, write_quorum_size) for start in range(len(ensemble)))


def covers_every_write_set(ensemble: Sequence[str], write_quorum_size: int, ack_quorum_size: int,
                           answered: Collection[str]) -> bool:
    """True once every write set of `ensemble` has W-A+1 bookies in `answered`.

    After fencing that many, no write set can still gather A acks for the old writer; a LAC
    reported by that many bounds every acknowledged entry."""
    need = recovery_quorum(write_quorum_size, ack_quorum_size)
    return all(sum(1 for b in members if b in answered) >= need for members in write_sets(ensemble, write_quorum_size))


def entry_absent(members: Sequence[str], write_quorum_size: int, ack_quorum_size: int,
                 absent: Collection[str]) -> bool:
    """True if W-A+1 bookies of the entry's write set definitely do not have it: then it was
    never acknowledged (an acknowledged entry is on A of them, and A + (W-A+1) > W)."""
    return sum(1 for b in members if b in absent) >= recovery_quorum(write_quorum_size, ack_quorum_size)


def ack_quorum_reachable(ensemble: Sequence[str], write_quorum_size: int, ack_quorum_size: int,
                         dead: Collection[str]) -> bool:
    """True if every write set still has A bookies outside `dead` (adds can still complete)."""
    return all(
        sum(1 for b in members if b not in dead) >= ack_quorum_size
        for members in write_sets(ensemble, write_quorum_size)
    )


def byte_bounded_chunks(items: Iterable[T], size_of: Callable[[T], int], entries_max: int,
                        bytes_max: int) -> Iterator[list[T]]:
    """Consecutive runs of at most `entries_max` items and (past the first item) `bytes_max`
    bytes: every batch sent to a bookie fits its message limit, whatever the entry sizes."""
    if entries_max < 1 or bytes_max < 1:
        raise ValueError(f"chunk bounds must be positive (entries {entries_max}, bytes {bytes_max})")
    chunk: list[T] = []
    size = 0
    for item in items:
        n = size_of(item)
        if chunk and (len(chunk) >= entries_max or size + n > bytes_max):
            yield chunk
            chunk, size = [], 0
        chunk.append(item)
        size += n
    if chunk:
        yield chunk

