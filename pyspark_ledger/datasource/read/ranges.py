"""The unit of a read plan: a range of entries of one fragment of one ledger, and how a plan is
cut into Spark input partitions. Pure: no I/O, no pyspark (tests/spark/test_planning.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from metadata import LedgerId, LedgerMetadata
from pyspark_ledger.datasource.errors import OptionError
from pyspark_ledger.datasource.rows import RowPlace


@dataclass(frozen=True, slots=True)
class LedgerRange:
    """Entries first..last (inclusive) of one fragment of one ledger. A read that starts or ends
    inside an Arrow entry reads only rows skip_rows.. of the first entry and rows ..keep_rows-1
    of the last one."""

    index: int  # position in the plan (spreads first-replica choice over the ensemble)
    seq: int  # the ledger's sequence number in its log (0 for a single-ledger read)
    ledger_id: LedgerId
    first_entry_id: int
    last_entry_id: int
    ensemble: tuple[str, ...]  # the fragment's bookies
    metadata: LedgerMetadata
    metadata_version: int
    place: RowPlace  # what its rows say about where they are (rows.py)
    skip_rows: int = 0  # rows of entry first_entry_id not read (they are before the start)
    keep_rows: int | None = None  # rows of entry last_entry_id read (None: all)

    @property
    def entries(self) -> int:
        return self.last_entry_id - self.first_entry_id + 1

    def rows_of(self, entry_id: int) -> tuple[int, int | None]:
        """(skip, keep) for one of the range's entries."""
        return (self.skip_rows if entry_id == self.first_entry_id else 0,
                self.keep_rows if entry_id == self.last_entry_id else None)

    def piece(self, first: int, last: int) -> LedgerRange:
        """Entries first..last of this range, with the row limits that still apply to them."""
        return replace(self, first_entry_id=first, last_entry_id=last,
                       skip_rows=self.skip_rows if first == self.first_entry_id else 0,
                       keep_rows=self.keep_rows if last == self.last_entry_id else None)


@dataclass(frozen=True, slots=True)
class Span:
    """Entries first..last of one ledger that a plan reads, with its row limits."""

    first: int
    last: int
    skip_rows: int = 0
    keep_rows: int | None = None


def add_fragment_ranges(ranges: list[LedgerRange], seq: int, lid: LedgerId, meta: LedgerMetadata, version: int,
                        span: Span, max_entries: int, place: RowPlace, *, limit: int | None = None) -> None:
    """Append the ranges covering `span` of one ledger: one per fragment (its own ensemble), each
    split to at most `max_entries` entries. More than `limit` ranges in all is an OptionError
    naming maxEntriesPerPartition."""
    whole = LedgerRange(0, seq, lid, span.first, span.last, (), meta, version, place, span.skip_rows, span.keep_rows)
    for seg_index, seg in enumerate(meta.segments):
        seg_last = meta.segment_last_entry_id(seg_index)
        lo = max(span.first, seg.first_entry_id)
        hi = span.last if seg_last is None else min(span.last, seg_last)
        while lo <= hi:
            top = min(hi, lo + max_entries - 1)
            ranges.append(replace(whole.piece(lo, top), index=len(ranges), ensemble=seg.bookies))
            if limit is not None and len(ranges) > limit:
                raise OptionError("maxEntriesPerPartition", f"the read would need more than {limit} partitions; raise it")
            lo = top + 1


def split_to_min_partitions(ranges: list[LedgerRange], min_partitions: int | None) -> list[LedgerRange]:
    """At least `min_partitions` ranges when the plan holds that many entries (an entry is never
    split): every range is cut into pieces of at most total // min_partitions entries, so large
    ranges are cut and small ones kept, as Kafka's minPartitions cuts large topic partitions.
    Plans with enough ranges already are returned as they are. Indexes are renumbered."""
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.entries for r in ranges)
    size = max(1, total // min_partitions)
    out: list[LedgerRange] = []
    for r in ranges:
        for lo in range(r.first_entry_id, r.last_entry_id + 1, size):
            out.append(replace(r.piece(lo, min(r.last_entry_id, lo + size - 1)), index=len(out)))
    return out
