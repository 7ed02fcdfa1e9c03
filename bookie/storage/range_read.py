"""Range reads in bulk: an index window -> verified runs of consecutive entries.

Why this module: for small entries a per-entry Python loop (unpack the header, slice, crc,
build a result object) cost about 1.5 us per entry, more than everything else a read does.
Here the byte bound, the pread plan and the header checks are numpy operations over the whole
window, entries of equal length (the common case) are cut out of a pread with one strided
copy and their crcs checked all at once (bookie.crc_batch: one crc32c call over the window's
data, about 0.02 us per entry); entries of mixed lengths get a crc32c call each, on a piece cut
by BytesIO.read inside a C iterator (about 0.1-0.2 us per entry in all).

A read answers entries first..first+count-1 (count bounded by entries and bytes, as
BookieStorage.read_range documents). Consecutive verified entries form an EntryRun: their
stored bytes (the client's encoded entries, without this bookie's at-rest header) end to end,
as a list of chunks, plus their lengths. Every other entry of the answer (missing, corrupt,
unreadable) is listed with its status. So every id of the answer is in exactly one run or in
`others`.

Chunks, not one buffer: the service joins a run's chunks into its response once (bookie/
run_answer.py), so the bytes are not also joined here. Entries of at least VIEW_BYTES_MIN on
average (Arrow entries, message batches) are chunks that are views of the pread buffer
(verified in place: no copy at all); smaller entries of mixed sizes are pieces cut by
BytesIO.read; entries of one size are one strided copy that drops the at-rest headers. A
bookie range read used to copy every byte five times after the pread (pieces, their join,
the preads' join, protobuf's field, protobuf's serialization); now once, into the response.
"""

from __future__ import annotations

import io
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import compress, pairwise, repeat

import numpy as np
from crc32c import crc32c

from bookie import crc_batch
from bookie.status import Status
from bookie.storage import records
from bookie.storage.config import LOCATION_OFFSET_BITS, READ_PREAD_BYTES_MAX
from bookie.storage.errors import ensure
from bookie.storage.ledger_index import HOLE, LOCATION_OFFSET_MASK

_HDR = records.ENTRY_HEADER_BYTES
# records.ENTRY_HEADER ("<QQQqII") as a numpy record, to check every header of a pread at once.
# The entry id is read as signed: ids are <= 2**63 - 1, and int64 compares exactly with the
# expected ids (uint64 against int64 would go through float64).
_HEADER_DTYPE = np.dtype([("scope", "<u8"), ("ledger", "<u8"), ("entry", "<i8"),
                          ("lac", "<i8"), ("length", "<u4"), ("crc", "<u4")])
ensure(_HEADER_DTYPE.itemsize == _HDR, "entry header layout and its numpy record disagree")
_HDR_COLUMNS = np.arange(_HDR, dtype=np.int64)

# pread(log_id, offset, size) -> bytes; raises KeyError / OSError (EntryLogs.pread).
Pread = Callable[[int, int, int], bytes]
# Entries at least this large on average are verified and served as views of the pread buffer
# (a view object per entry costs about what copying 2 KiB does).
VIEW_BYTES_MIN = 4096
Chunk = bytes | memoryview


@dataclass(frozen=True, slots=True)
class EntryRun:
    """Verified entries first_entry_id, first_entry_id+1, ...: entry i is
    data[sum(lengths[:i]) : sum(lengths[:i+1])] of the chunks joined."""

    first_entry_id: int
    lengths: list[int]
    chunks: list[Chunk]  # the entries' bytes end to end, in pieces (not one piece per entry)

    @property
    def count(self) -> int:
        return len(self.lengths)

    @property
    def size_bytes(self) -> int:
        return sum(map(len, self.chunks))

    @property
    def data(self) -> bytes:
        """The run's bytes as one buffer (a copy unless it is one bytes chunk): for the
        per-entry answer and tests; the service sends the chunks as they are."""
        if len(self.chunks) == 1 and isinstance(self.chunks[0], bytes):
            return self.chunks[0]
        return b"".join(self.chunks)


@dataclass(frozen=True, slots=True)
class Corrupt:
    """An entry this bookie holds a damaged (or unreadable) copy of: for the engine's log."""

    entry_id: int
    location: int
    length: int


@dataclass(slots=True)
class RangeRead:
    count: int = 0  # the answer covers first .. first+count-1
    runs: list[EntryRun] = field(default_factory=list)
    others: list[tuple[int, Status]] = field(default_factory=list)  # (entry id, status), id order
    data_bytes: int = 0
    corrupt: list[Corrupt] = field(default_factory=list)
    preads: int = 0
    failed_preads: list[tuple[int, int, str]] = field(default_factory=list)  # (log id, offset, error)


def answer_count(locs: np.ndarray, lens: np.ndarray, max_bytes: int) -> int:
    """How many window slots the answer covers: stop before the first present entry (other
    than the first slot, which is always answered) that would take the data past max_bytes."""
    sizes = np.where(locs != HOLE, lens, 0)
    over = np.cumsum(sizes) > max_bytes
    over &= locs != HOLE
    over[0] = False
    return int(np.argmax(over)) if over.any() else len(locs)


def pread_starts(log_ids: np.ndarray, offsets: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Indexes (into the present entries, in id order) where a new pread starts: entries
    back to back in one entry log share a pread, cut into pieces of about
    READ_PREAD_BYTES_MAX (a pread is < READ_PREAD_BYTES_MAX + one entry)."""
    n = len(offsets)
    new = np.ones(n, dtype=bool)
    new[1:] = (log_ids[1:] != log_ids[:-1]) | (offsets[1:] != ends[:-1])
    segment_start = offsets[new][np.cumsum(new) - 1]
    piece = (offsets - segment_start) // READ_PREAD_BYTES_MAX
    new[1:] |= piece[1:] != piece[:-1]
    return np.flatnonzero(new)


def _check_headers(headers: np.ndarray, ids: np.ndarray, lens: np.ndarray, scope: int,
                   ledger_id: int) -> np.ndarray:
    return ((headers["entry"] == ids) & (headers["length"] == lens)
            & (headers["scope"] == scope) & (headers["ledger"] == ledger_id))


def _crcs(pieces: Iterable[Chunk], n: int) -> np.ndarray:
    return np.fromiter(map(crc32c, pieces), dtype=np.uint32, count=n)


def _verify(buf: bytes, rel: np.ndarray, lens: np.ndarray, ids: np.ndarray,
            scope: int, ledger_id: int) -> tuple[np.ndarray, list[Chunk]]:
    """Check the entries of one pread buffer (back to back from its start, at byte offsets
    `rel`, as pread_starts groups them) against their expected ids and lengths and their
    crc32c. Returns the ok mask and the ok entries' data, end to end, in chunks."""
    n = len(rel)
    if n and int(lens.min()) == int(lens.max()) < VIEW_BYTES_MIN and n * (_HDR + int(lens[0])) <= len(buf):
        return _verify_equal(buf, n, int(lens[0]), ids, scope, ledger_id)
    ok = rel + _HDR + lens <= len(buf)  # a short pread (a log cut short): the tail is unknown
    m = int(ok.sum())  # back to back, so the complete entries are a prefix
    if m == 0:
        return ok, []
    arr = np.frombuffer(buf, dtype=np.uint8)
    headers = arr[rel[:m, None] + _HDR_COLUMNS].view(_HEADER_DTYPE).reshape(m)
    data: list[Chunk]
    if int(lens[:m].sum()) >= VIEW_BYTES_MIN * m:
        # Large entries: each one's data a view of the buffer, its crc computed in place.
        starts = rel[:m] + _HDR
        data = list(map(memoryview(buf).__getitem__, map(slice, starts.tolist(), (starts + lens[:m]).tolist())))
    else:
        # Cut header, data, header, data, ... in order; BytesIO.read inside map makes one bytes
        # object per piece without a Python-level loop (the cheapest per-entry object).
        sizes = np.full(2 * m, _HDR, dtype=np.int64)
        sizes[1::2] = lens[:m]
        pieces: list[Chunk] = list(map(io.BytesIO(buf).read, sizes.tolist()))
        data = pieces[1::2]
    good = _check_headers(headers, ids[:m], lens[:m], scope, ledger_id)
    good &= _crcs(data, m) == headers["crc"]
    ok[:m] = good
    return ok, list(compress(data, good.tolist()))


def _verify_equal(buf: bytes, n: int, length: int, ids: np.ndarray, scope: int,
                  ledger_id: int) -> tuple[np.ndarray, list[Chunk]]:
    """_verify when every entry has the same length (the common case: fixed-size records):
    the buffer is an n x (header + data) grid, so headers and data come out with one strided
    copy each, and the crcs of many entries are checked all at once (bookie.crc_batch); only
    when that finds a mismatch (or for few entries) is each entry's crc checked."""
    grid = np.frombuffer(buf, dtype=np.uint8, count=n * (_HDR + length)).reshape(n, _HDR + length)
    headers = np.ascontiguousarray(grid[:, :_HDR]).view(_HEADER_DTYPE).reshape(n)
    data = grid[:, _HDR:].tobytes()
    good = _check_headers(headers, ids, np.full(n, length), scope, ledger_id)
    if n < crc_batch.PIECES_MIN or not crc_batch.all_match(data, headers["crc"], length):
        good &= _crcs(map(io.BytesIO(data).read, repeat(length, n)), n) == headers["crc"]
    if not good.all():
        data = grid[good, _HDR:].tobytes()
    return good, [data] if data else []


def read_window(pread: Pread, ledger: tuple[int, int], first: int, locs: array[int],
                lens: array[int], max_bytes: int, missing: Status) -> RangeRead:
    """Read and verify the index window (locs, lens) of ids first..; see the module doc.
    `missing` is the status of ids the window has no location for."""
    loc_all = np.frombuffer(locs, dtype=np.int64)
    len_all = np.frombuffer(lens, dtype=np.int32).astype(np.int64)
    n = answer_count(loc_all, len_all, max_bytes)
    loc_all, len_all = loc_all[:n], len_all[:n]
    status = np.full(n, int(missing), dtype=np.int64)
    pos = np.flatnonzero(loc_all != HOLE)  # slots with a location
    out = RangeRead(count=n)
    chunks: list[Chunk] = []
    if len(pos):
        loc, ln = loc_all[pos], len_all[pos]
        log_ids, offsets = loc >> LOCATION_OFFSET_BITS, loc & LOCATION_OFFSET_MASK
        ends = offsets + _HDR + ln
        starts = pread_starts(log_ids, offsets, ends)
        bounds = [*starts.tolist(), len(pos)]
        out.preads = len(starts)
        for a, b in pairwise(bounds):
            log_id, offset = int(log_ids[a]), int(offsets[a])
            try:
                buf = pread(log_id, offset, int(ends[b - 1]) - offset)
            except (KeyError, OSError) as e:
                out.failed_preads.append((log_id, offset, repr(e)))
                buf = b""  # every entry of this pread is unknown
            ok, got = _verify(buf, offsets[a:b] - offsets[a], ln[a:b], first + pos[a:b],
                              ledger[0], ledger[1])
            status[pos[a:b]] = np.where(ok, int(Status.OK), int(Status.UNKNOWN_ENTRY_STATE))
            chunks += got
            for j in np.flatnonzero(~ok).tolist():
                out.corrupt.append(Corrupt(first + int(pos[a + j]), int(loc[a + j]), int(ln[a + j])))
    _collect(out, first, status, len_all, chunks)
    return out


def _collect(out: RangeRead, first: int, status: np.ndarray, lens: np.ndarray, chunks: list[Chunk]) -> None:
    """Group the ok slots into runs of consecutive ids (chunks: the ok entries, end to end)."""
    is_ok = status == int(Status.OK)
    bad = np.flatnonzero(~is_ok)
    out.others = [(first + k, Status(s)) for k, s in zip(bad.tolist(), status[bad].tolist())]
    ok_pos = np.flatnonzero(is_ok)
    out.data_bytes = sum(map(len, chunks))
    ensure(out.data_bytes == int(lens[ok_pos].sum()), "a range read's verified bytes differ from its entries' lengths")
    if not len(ok_pos):
        return
    breaks = np.flatnonzero(np.diff(ok_pos) != 1) + 1
    bounds = [0, *breaks.tolist(), len(ok_pos)]
    ok_lens = lens[ok_pos]
    if len(bounds) == 2:  # one run (no gap, no damage: the usual answer) takes the chunks as they are
        out.runs.append(EntryRun(first + int(ok_pos[0]), ok_lens.tolist(), chunks))
        return
    # Gaps or damage (rare): the runs are cut out of the chunks joined.
    data = b"".join(chunks)
    byte_at = np.concatenate(([0], np.cumsum(ok_lens)))[bounds].tolist()  # where each run starts
    for (a, b), (start, end) in zip(pairwise(bounds), pairwise(byte_at)):
        out.runs.append(EntryRun(first + int(ok_pos[a]), ok_lens[a:b].tolist(), [data[start:end]]))
