"""Per-ledger in-memory state: master key, fence bit, LAC, and the entry index.

The index maps entry id -> (packed location, length). Ids are split into pages of
INDEX_PAGE_ENTRIES; a page holds two flat arrays (int64 locations, int32 lengths; 12 bytes per
slot, HOLE = -1 for ids it does not have) covering only the span of ids seen in that page, and
growing at either end. So a ledger written in order costs 12 bytes per entry, holes from
striping (E > W) cost 12 bytes each, and ids far apart (a bookie that rejoins a ledger's
ensemble much later, or a stray huge id) only cost the pages they touch: no id can make the
index allocate more than one page's worth of holes.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator

from bookie.storage.config import INDEX_PAGE_BITS, LAC_NONE, LOCATION_OFFSET_BITS
from bookie.storage.errors import ensure

HOLE = -1
LOCATION_OFFSET_MASK = (1 << LOCATION_OFFSET_BITS) - 1
_HOLE_BYTES_8 = b"\xff" * 8


def pack_location(log_id: int, offset: int) -> int:
    return (log_id << LOCATION_OFFSET_BITS) | offset


def unpack_location(location: int) -> tuple[int, int]:
    return location >> LOCATION_OFFSET_BITS, location & LOCATION_OFFSET_MASK


def holes(count: int) -> tuple[array[int], array[int]]:
    """(locations, lengths) arrays of `count` holes."""
    locs = array("q")
    locs.frombytes(_HOLE_BYTES_8 * count)
    lens = array("i")
    lens.frombytes(bytes(4 * count))
    return locs, lens


class IndexPage:
    """Ids base .. base+len(locs)-1, all inside page `page_no`."""

    __slots__ = ("page_no", "base", "locs", "lens")

    def __init__(self, page_no: int, base: int, locs: array[int], lens: array[int]) -> None:
        self.page_no = page_no
        self.base = base
        self.locs = locs
        self.lens = lens

    @property
    def end(self) -> int:
        return self.base + len(self.locs)

    def cover(self, lo: int, hi: int) -> None:
        """Grow (with holes) to include ids lo..hi, which must lie inside this page."""
        ensure(lo >> INDEX_PAGE_BITS == self.page_no == hi >> INDEX_PAGE_BITS,
               "index page asked to cover ids of another page")
        if not self.locs:
            self.base = lo
            self.locs, self.lens = holes(hi - lo + 1)
            return
        if lo < self.base:
            locs, lens = holes(self.base - lo)
            locs.extend(self.locs)
            lens.extend(self.lens)
            self.base, self.locs, self.lens = lo, locs, lens
        end = self.end
        if hi >= end:
            self.locs.frombytes(_HOLE_BYTES_8 * (hi - end + 1))
            self.lens.frombytes(bytes(4 * (hi - end + 1)))


class LedgerIndex:
    __slots__ = ("pages", "count", "size_bytes", "_tail")

    def __init__(self) -> None:
        self.pages: dict[int, IndexPage] = {}
        self.count = 0
        self.size_bytes = 0
        self._tail: IndexPage | None = None  # the page written last: where appends go

    # ---- writes -------------------------------------------------------------------------

    def put_batch(self, ids: list[int], locs: array[int], lens: array[int], contiguous: bool,
                  data_bytes: int) -> None:
        """Record a batch's locations (`data_bytes` = sum of lens). An existing id is
        overwritten (re-replication writes the same bytes again)."""
        n = len(ids)
        tail = self._tail
        if (contiguous and tail is not None and ids[0] == tail.end
                and ids[-1] >> INDEX_PAGE_BITS == tail.page_no):
            # Common case: the batch continues the ledger inside the current page.
            tail.locs.extend(locs)
            tail.lens.extend(lens)
            self.count += n
            self.size_bytes += data_bytes
            return
        i = 0
        while i < n:
            page_no = ids[i] >> INDEX_PAGE_BITS
            if contiguous:
                j = min(n, i + ((page_no + 1) << INDEX_PAGE_BITS) - ids[i])
                page = self._page(page_no)
                page.cover(ids[i], ids[j - 1])
                self._assign_run(page, ids[i] - page.base, locs[i:j], lens[i:j])
            else:
                j = i + 1
                lo = hi = ids[i]
                while j < n and ids[j] >> INDEX_PAGE_BITS == page_no:
                    lo, hi = min(lo, ids[j]), max(hi, ids[j])
                    j += 1
                page = self._page(page_no)
                page.cover(lo, hi)
                self._assign_each(page, ids, locs, lens, i, j)
            i = j
        self._tail = page

    def _page(self, page_no: int) -> IndexPage:
        page = self.pages.get(page_no)
        if page is None:
            page = self.pages[page_no] = IndexPage(page_no, page_no << INDEX_PAGE_BITS,
                                                   array("q"), array("i"))
        return page

    def _assign_run(self, page: IndexPage, at: int, locs: array[int], lens: array[int]) -> None:
        n = len(locs)
        self.count += page.locs[at : at + n].count(HOLE)
        self.size_bytes += sum(lens) - sum(page.lens[at : at + n])
        page.locs[at : at + n] = locs
        page.lens[at : at + n] = lens

    def _assign_each(self, page: IndexPage, ids: list[int], locs: array[int], lens: array[int],
                     i: int, j: int) -> None:
        base, plocs, plens = page.base, page.locs, page.lens
        for k in range(i, j):
            slot = ids[k] - base
            if plocs[slot] == HOLE:
                self.count += 1
            else:
                self.size_bytes -= plens[slot]
            plocs[slot] = locs[k]
            plens[slot] = lens[k]
            self.size_bytes += lens[k]

    def relocate(self, entry_id: int, old_loc: int, new_loc: int) -> bool:
        """Point entry_id at new_loc (HOLE: drop it) if it still points at old_loc (compaction:
        an entry rewritten or deleted meanwhile keeps its newer state)."""
        page = self.pages.get(entry_id >> INDEX_PAGE_BITS)
        slot = entry_id - page.base if page is not None else -1
        if page is None or not 0 <= slot < len(page.locs) or page.locs[slot] != old_loc:
            return False
        page.locs[slot] = new_loc
        if new_loc == HOLE:
            self.count -= 1
            self.size_bytes -= page.lens[slot]
            page.lens[slot] = 0
        return True

    # ---- reads --------------------------------------------------------------------------

    def get(self, entry_id: int) -> tuple[int, int] | None:
        page = self.pages.get(entry_id >> INDEX_PAGE_BITS)
        if page is None:
            return None
        slot = entry_id - page.base
        if not 0 <= slot < len(page.locs) or page.locs[slot] == HOLE:
            return None
        return page.locs[slot], page.lens[slot]

    def window(self, first: int, count: int) -> tuple[array[int], array[int]]:
        """Copies of (locations, lengths) for ids first .. first+count-1, HOLE where absent."""
        last = first + count - 1
        page = self.pages.get(first >> INDEX_PAGE_BITS)
        if page is not None and page.base <= first and last < page.end:
            at = first - page.base
            return page.locs[at : at + count], page.lens[at : at + count]
        locs, lens = holes(count)
        for page_no in range(first >> INDEX_PAGE_BITS, (last >> INDEX_PAGE_BITS) + 1):
            page = self.pages.get(page_no)
            if page is None:
                continue
            lo, hi = max(first, page.base), min(last + 1, page.end)
            if lo < hi:
                locs[lo - first : hi - first] = page.locs[lo - page.base : hi - page.base]
                lens[lo - first : hi - first] = page.lens[lo - page.base : hi - page.base]
        return locs, lens

    def items(self) -> Iterator[tuple[int, int, int]]:
        """(entry id, location, length) of every present entry, in id order."""
        for page_no in sorted(self.pages):
            page = self.pages[page_no]
            base, lens = page.base, page.lens
            for i, loc in enumerate(page.locs):
                if loc != HOLE:
                    yield base + i, loc, lens[i]

    def restore_page(self, base: int, locs: array[int], lens: array[int]) -> None:
        """Add a page loaded from a checkpoint (count and size are restored separately)."""
        page_no = base >> INDEX_PAGE_BITS
        ensure(len(locs) == len(lens) and (not locs or (base + len(locs) - 1) >> INDEX_PAGE_BITS == page_no),
               "checkpointed index page spans pages")
        ensure(page_no not in self.pages, "checkpointed index page duplicated")
        page = IndexPage(page_no, base, locs, lens)
        self.pages[page_no] = page
        if self._tail is None or page_no > self._tail.page_no:
            self._tail = page


class LedgerMeta:
    """Mutable state of one ledger; guarded by the engine lock."""

    __slots__ = ("key", "fenced", "deleted", "lac", "index", "closed_last")

    def __init__(self, key: bytes | None) -> None:
        self.key = key
        self.fenced = False
        self.deleted = False
        self.lac = LAC_NONE
        self.index = LedgerIndex()
        # Last entry of the ledger once metadata says CLOSED (learned by GC; None until then):
        # entries past it were written by a fenced writer and are never served.
        self.closed_last: int | None = None

    def mark_deleted(self) -> None:
        # Keep only a tombstone: the entries' space is reclaimed by a future GC.
        self.deleted = True
        self.key = None
        self.fenced = False
        self.index = LedgerIndex()
