"""ReadHandle: LAC-bounded reads of one ledger, with failover inside each entry's write set.

Readers never see past the LAC of an open ledger (every entry up to it is on A bookies) nor past
the last entry of a closed one. Reads are batched ranges; for each entry the bookies of its write
set are tried in turn (failover on transport error, timeout, bad status or digest mismatch), with a
speculative read to the next replica when the first is slow.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING

from bookie.status import Status
from metadata import LedgerId, LedgerMetadata, write_set
from metadata.errors import MetadataError
from metadata.offload_record import is_offloaded
from pyspark_ledger.errors import (
    BookieBusyError,
    DigestMismatchError,
    EntryFormatError,
    LedgerError,
    ReadError,
)
from pyspark_ledger.ledger.context import LedgerContext
from pyspark_ledger.ledger.keys import Credentials, resolve_keys
from pyspark_ledger.ledger.read_repair import ReadRepair
from pyspark_ledger.protocol.distribution import covers_every_write_set
from pyspark_ledger.protocol.entry_format import Entry, decode_entry
from pyspark_ledger.protocol.invariants import InvariantError

if TYPE_CHECKING:
    from pyspark_ledger.offload.parquet_files import LedgerFile

log = logging.getLogger(__name__)

READ_CHUNK_ENTRIES_MAX = 4_096
READ_CHUNK_BYTES_MAX = 8 * 2**20
SPECULATIVE_READ_DELAY_S = 0.5
READ_RPC_TIMEOUT_S_MAX = 10.0  # a read RPC never waits longer; the client's rpc_timeout_s may be lower
TAIL_LONG_POLL_MS = 1_000
# A bookie whose long polls are all taken (RESOURCE_EXHAUSTED, bookie/long_polls.py): wait at most
# this long (never longer than the long poll asked for) and read its LAC without waiting.
LONG_POLL_BUSY_WAIT_S = 1.0
LAC_READ_TIMEOUT_S = 5.0
READ_ROUND_RETRY_DELAY_S = 0.4

# One range read's answer: (intact copies, errors per entry, where a byte-capped answer stopped).
ReadAnswer = tuple[dict[int, Entry], dict[int, list[str]], int | None]


def closed_last_entry_id(meta: LedgerMetadata) -> int:
    """The last entry of a closed ledger (-1: closed empty); LedgerMetadata sets it exactly when CLOSED."""
    last = meta.last_entry_id
    if not meta.is_closed or last is None:
        raise InvariantError(f"ledger {meta.ledger_id}: asked for the last entry of a ledger that is not closed")
    return last


class ReadHandle:
    def __init__(self, context: LedgerContext, metadata: LedgerMetadata, version: int, credentials: Credentials):
        """credentials: the ledger's password (checked against the metadata), or the keys an
        operator fetched (ledger/keys.py)."""
        keys = resolve_keys(metadata, credentials)
        self._ctx = context
        self._metadata = metadata
        self._version = version
        self._read_digest = keys.digest
        self._read_key = (metadata.ledger_id.scope_id, metadata.ledger_id.id)
        self._master_key = keys.master_key  # reads carry it: bookies may require it (--require-read-auth)
        self._known_lac = closed_last_entry_id(metadata) if metadata.is_closed else -1
        self.repairs = ReadRepair(context, self._read_key, keys)
        self._handle_closed = False
        self._executor: ThreadPoolExecutor | None = None
        self._executor_lock = threading.Lock()
        self._offloaded_file: LedgerFile | None = None  # an OFFLOADED ledger's file, opened on first use

    # ---- metadata -----------------------------------------------------------------------------

    @property
    def ledger_id(self) -> LedgerId:
        return self._metadata.ledger_id

    @property
    def metadata(self) -> LedgerMetadata:
        return self._metadata

    def is_closed(self) -> bool:
        return self._metadata.is_closed

    def refresh(self) -> LedgerMetadata:
        self._metadata, self._version = self._ctx.ledgers.read(self.ledger_id)
        if self._metadata.is_closed:
            self._known_lac = closed_last_entry_id(self._metadata)
        return self._metadata

    # ---- LAC ----------------------------------------------------------------------------------

    def last_add_confirmed(self) -> int:
        """The last entry known to be acknowledged: the last entry of a closed ledger; for an open
        one, the highest LAC reported by enough bookies of the last fragment (W-A+1 in every write
        set), never lower than what this handle saw before."""
        meta = self._metadata
        if meta.is_closed:
            return closed_last_entry_id(meta)
        lac = self._read_lac_quorum(meta)
        self._known_lac = max(self._known_lac, lac)
        return self._known_lac

    def _read_lac_quorum(self, meta: LedgerMetadata, long_poll_min_lac: int | None = None, long_poll_ms: int = 0) -> int:
        seg = meta.segments[-1]
        # Entries before the last fragment were all acknowledged when it was created.
        floor = seg.first_entry_id - 1
        futures: dict[Future[int | None], str] = {}
        pool = self._pool()
        for b in seg.bookies:
            if self._ctx.pool.faults.drop("read_lac", b):
                continue
            futures[pool.submit(self._lac_from, b, long_poll_min_lac, long_poll_ms)] = b
        answered: set[str] = set()
        best = floor

        def covered(bookies: set[str]) -> bool:  # W-A+1 answers in every write set bound the LAC
            return covers_every_write_set(seg.bookies, meta.write_quorum_size, meta.ack_quorum_size, bookies)

        deadline = time.monotonic() + LAC_READ_TIMEOUT_S + long_poll_ms / 1000
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=max(deadline - time.monotonic(), 0), return_when=FIRST_COMPLETED)
            if not done:
                break
            for f in done:
                lac = f.result()
                if lac is not None:
                    answered.add(futures[f])
                    best = max(best, lac)
            if long_poll_min_lac is not None and best >= long_poll_min_lac:
                break
            if long_poll_min_lac is None and covered(answered):
                break
        if long_poll_min_lac is None and not covered(answered):
            raise ReadError(
                f"ledger {self.ledger_id}: cannot determine the LAC, too few bookies answered ({sorted(answered)})"
            )
        return best

    def _lac_from(self, bookie_id: str, long_poll_min_lac: int | None, long_poll_ms: int) -> int | None:
        try:
            try:
                resp = self._ctx.pool.get(bookie_id).read_lac(
                    self._read_key, long_poll_min_lac=long_poll_min_lac, long_poll_timeout_ms=long_poll_ms,
                    master_key=self._master_key,
                    timeout_s=min(LAC_READ_TIMEOUT_S, self._rpc_timeout_s()),
                )
            except BookieBusyError:
                if long_poll_min_lac is None:
                    return None
                # Its long polls are taken: a short bounded wait stands in for the long poll (a
                # tailing reader must not spin), then a plain read of the LAC.
                time.sleep(min(long_poll_ms / 1000, LONG_POLL_BUSY_WAIT_S))
                resp = self._ctx.pool.get(bookie_id).read_lac(
                    self._read_key, master_key=self._master_key, timeout_s=min(LAC_READ_TIMEOUT_S, self._rpc_timeout_s()))
        except LedgerError:
            return None
        if resp.status == Status.OK:
            return int(resp.lac)
        if resp.status == Status.NO_SUCH_LEDGER:
            return -1  # nothing written to this bookie yet: a definite answer
        return None

    # ---- reads --------------------------------------------------------------------------------

    def read_entries(self, first: int, last: int) -> Iterator[Entry]:
        """Entries first..last inclusive, in order. Refuses anything past the LAC (open ledger) or the
        last entry (closed ledger)."""
        if first < 0 or last < first:
            raise LedgerError(f"bad entry range {first}..{last}")
        bound = self._read_bound()
        if last > bound:
            what = "last entry" if self._metadata.is_closed else "last add confirmed"
            raise ReadError(f"ledger {self.ledger_id}: cannot read up to {last}, the {what} is {bound}")
        return self._iter_entries(first, last)

    def read_planned(self, first: int, last: int) -> Iterator[Entry]:
        """Entries first..last without checking them against the LAC: for planners (Spark) that
        bounded the range by the LAC or last entry already, at planning time."""
        if first < 0 or last < first:
            raise LedgerError(f"bad entry range {first}..{last}")
        return self._iter_entries(first, last)

    def read_entry(self, entry_id: int) -> Entry:
        return next(iter(self.read_entries(entry_id, entry_id)))

    def _read_bound(self) -> int:
        if self._metadata.is_closed:
            return closed_last_entry_id(self._metadata)
        if self._known_lac >= 0:
            return self._known_lac
        return self.last_add_confirmed()

    def _iter_entries(self, first: int, last: int) -> Iterator[Entry]:
        if is_offloaded(self._metadata):
            yield from self._offloaded(first, last)
            return
        nxt = first
        while nxt <= last:
            meta = self._metadata
            seg_index = meta.segment_index_for(nxt)
            seg_last = meta.segment_last_entry_id(seg_index)
            chunk_last = min(last, nxt + READ_CHUNK_ENTRIES_MAX - 1, seg_last if seg_last is not None else last)
            chunk_started = time.monotonic()
            try:
                entries = self._read_chunk(meta, seg_index, nxt, chunk_last)
            except LedgerError:
                # Offloaded since this handle read its metadata (its bookies' copies may be gone):
                # the object store has every entry (docs/tiered-storage.md).
                if not meta.is_closed or not self._offloaded_meanwhile():
                    raise
                yield from self._offloaded(nxt, last)
                return
            self._ctx.metrics.chunk_read(len(entries), chunk_started)
            yield from entries
            nxt = entries[-1].entry_id + 1

    def _offloaded_meanwhile(self) -> bool:
        """After a failed read of a closed ledger: whether it is OFFLOADED now (then reads go to
        its file). A metadata error here says no: the read's own error is the one to raise."""
        try:
            return is_offloaded(self.refresh())
        except MetadataError:
            return False

    def _offloaded(self, first: int, last: int) -> Iterator[Entry]:
        """The entries of an OFFLOADED ledger, from its file in the object store (never a bookie).
        The password was checked against the metadata when the handle was made (resolve_keys)."""
        # Imported here: pyarrow's Parquet reader loads only in a process that meets an offloaded ledger.
        from pyspark_ledger.offload.offloaded_reads import offloaded_entries, open_ledger_file

        if self._offloaded_file is None:
            self._offloaded_file = open_ledger_file(self._metadata)
        chunk_started = time.monotonic()
        count = 0
        for e in offloaded_entries(self._offloaded_file, first, last):
            count += 1
            yield e
        self._ctx.metrics.chunk_read(count, chunk_started)

    def _read_chunk(self, meta: LedgerMetadata, seg_index: int, first: int, last: int) -> list[Entry]:
        """Read first..last (one fragment). Returns a non-empty ordered prefix (bounded by bytes).

        Round r asks, for every entry still missing, the r-th bookie of its write set (one range
        read per bookie). If a bookie has not answered after SPECULATIVE_READ_DELAY_S, the same
        entries are also asked of their next replica, and the first valid copy wins."""
        ensemble = meta.segments[seg_index].bookies
        e_size, w_size = meta.ensemble_size, meta.write_quorum_size
        got: dict[int, Entry] = {}
        errors: dict[int, list[str]] = {}
        upto = last
        pool = self._pool()

        def replica(e: int, r: int) -> str:
            return ensemble[write_set(e, e_size, w_size)[r]]

        def submit(r: int, ids: list[int]) -> dict[Future[ReadAnswer], int]:
            by_bookie: dict[str, list[int]] = {}
            for e in ids:
                by_bookie.setdefault(replica(e, r), []).append(e)
            out: dict[Future[ReadAnswer], int] = {}
            for b, bids in by_bookie.items():
                f = pool.submit(self._read_from, b, bids[0], bids[-1], set(bids))
                f.entry_ids = bids  # type: ignore[attr-defined]  # for a speculative re-read
                out[f] = r
            return out

        # Every replica failed for some entries: one more pass over every replica after a pause,
        # for bookies that were just restarted (their channels reconnect within ~300 ms). The
        # whole write set again, not its first replica only: that one may have answered "no
        # such entry" (a replacement the entry never reached) while the holders were the ones
        # still reconnecting.
        for attempt in list(range(w_size)) + [-1] + list(range(1, w_size)):
            if attempt == -1:
                if all(e in got for e in range(first, upto + 1)):
                    break
                time.sleep(READ_ROUND_RETRY_DELAY_S)
                attempt = 0
            wanted = [e for e in range(first, upto + 1) if e not in got]
            if not wanted:
                break
            futures = submit(attempt, wanted)
            done, slow = wait(futures, timeout=SPECULATIVE_READ_DELAY_S)
            if slow and attempt + 1 < w_size:
                slow_ids = sorted({e for f in slow for e in self._inflight_ids(f)})
                log.info("speculative read: a replica is slow ledger=%s entries=%d..%d", self.ledger_id, slow_ids[0],
                         slow_ids[-1])
                futures.update(submit(attempt + 1, slow_ids))
            wait(futures, timeout=self._rpc_timeout_s() + 3)
            for f in futures:
                if not f.done():
                    continue
                result, errs, reach = f.result()
                for eid, entry in result.items():
                    got.setdefault(eid, entry)
                for eid, msgs in errs.items():
                    errors.setdefault(eid, []).extend(msgs)
                # A bytes-bounded answer ends early: what lies past it was not reached, which
                # says nothing against those entries. This chunk ends there (the caller reads on
                # from the next entry), so a long read of MiB entries with a replica down is not
                # mistaken for unreadable entries.
                if reach is not None:
                    upto = max(first, min(upto, reach))
        self.repairs.repair(got, first, last)
        out = []
        for e in range(first, upto + 1):
            if e not in got:
                why = "; ".join(errors.get(e, ["no answer"]))
                raise ReadError(f"ledger {self.ledger_id}: entry {e} unreadable from its write set: {why}")
            out.append(got[e])
        return out

    @staticmethod
    def _inflight_ids(f: Future[ReadAnswer]) -> list[int]:
        return list(getattr(f, "entry_ids", []))

    def _read_from(self, bookie_id: str, first: int, last: int,
                   wanted: set[int]) -> ReadAnswer:
        """One range read: (intact copies, errors per entry, the last entry the answer reached if
        the bookie stopped at its byte limit before `last`, else None)."""
        out: dict[int, Entry] = {}
        errors: dict[int, list[str]] = {}
        if self._ctx.pool.faults.drop("read", bookie_id):
            return out, {e: [f"{bookie_id}: dropped"] for e in wanted}, None
        try:
            resp = self._ctx.pool.get(bookie_id).read(
                self._read_key, first, last, max_entries=READ_CHUNK_ENTRIES_MAX, max_bytes=READ_CHUNK_BYTES_MAX,
                timeout_s=self._rpc_timeout_s(), master_key=self._master_key,
            )
        except LedgerError as exc:
            return out, {e: [str(exc)] for e in wanted}, None
        if resp.status != Status.OK:
            return out, {e: [f"{bookie_id}: {Status(resp.status).name}"] for e in wanted}, None
        reach = resp.entry_ids[-1] if resp.entry_ids and resp.entry_ids[-1] < last else None
        scope, lid = self._read_key
        digest = self._read_digest
        for eid, st, data in zip(resp.entry_ids, resp.entry_status, resp.entries):
            if eid not in wanted:
                continue
            if st != Status.OK:
                errors.setdefault(eid, []).append(f"{bookie_id}: {Status(st).name}")
                self.repairs.note(bookie_id, eid, Status(st), self._metadata.is_closed)
                continue
            try:
                out[eid] = decode_entry(digest, data, scope, lid, eid)
            except (DigestMismatchError, EntryFormatError) as exc:
                log.warning("bad copy of an entry, trying another replica bookie=%s error=%s", bookie_id, exc)
                errors.setdefault(eid, []).append(f"{bookie_id}: {exc}")
                self.repairs.note(bookie_id, eid, None, self._metadata.is_closed)
        return out, errors, reach

    # ---- tailing ------------------------------------------------------------------------------

    def tail(self, from_entry: int = 0, *, idle_timeout_s: float | None = None) -> Iterator[Entry]:
        """Follow the ledger: yield every entry from `from_entry` as it becomes confirmed, until the
        ledger is closed and fully read (or nothing new arrived for idle_timeout_s). Uses long-poll
        LAC reads, not sleeps."""
        nxt = from_entry
        idle_since = time.monotonic()
        while True:
            meta = self._metadata
            bound = closed_last_entry_id(meta) if meta.is_closed else self._known_lac
            if nxt <= bound:
                for e in self._iter_entries(nxt, bound):
                    yield e
                    nxt = e.entry_id + 1
                idle_since = time.monotonic()
                continue
            if meta.is_closed:
                return
            if idle_timeout_s is not None and time.monotonic() - idle_since > idle_timeout_s:
                return
            try:
                lac = self._read_lac_quorum(meta, long_poll_min_lac=nxt, long_poll_ms=TAIL_LONG_POLL_MS)
            except ReadError:
                lac = -1
            if lac >= nxt:
                self._known_lac = max(self._known_lac, lac)
            else:
                # Nothing new: the ledger may have been closed or changed its ensemble.
                self.refresh()

    # ---- plumbing ------------------------------------------------------------------------------

    def _rpc_timeout_s(self) -> float:
        return min(READ_RPC_TIMEOUT_S_MAX, self._ctx.pool.rpc_timeout_s)

    def _pool(self) -> ThreadPoolExecutor:
        with self._executor_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="ledger-read")
            return self._executor

    def close(self) -> None:
        self._handle_closed = True
        with self._executor_lock:
            if self._executor is not None:
                self._executor.shutdown(wait=False, cancel_futures=True)
                self._executor = None

    def __enter__(self) -> ReadHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

