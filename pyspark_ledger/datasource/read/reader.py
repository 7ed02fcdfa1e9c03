"""Executor side of a batch read: one planned range -> Arrow record batches.

Fast path (every bookie of the fragment holds every entry, i.e. W == E, the common case):
range-read windows of entries from one replica with the bookie client, answered as runs
(bookie.proto EntryRun: one buffer plus lengths per run of consecutive entries, so no side
builds a message or object per entry), verify each run in bulk (entry_decode.decode_blob, the
one decoder of the read path) and build each batch from contiguous buffers. Windows are fetched and
verified by a small pool ahead of the consumer (bounded: WINDOWS_AHEAD_MAX), so bookie I/O,
verification and Spark's socket writes overlap. Any trouble in a window (transport error,
bad status, missing or corrupt entry) hands the rest of that window to the client's
ReadHandle.read_planned, which fails over inside each entry's write set, and later windows
start from the next replica. Striped fragments (W < E) use read_planned throughout.

An OFFLOADED ledger's ranges come from its Parquet file in the object store, by row group
(pyspark_ledger/offload), never from a bookie.

The planner already bounded every range by the LAC or last entry, so nothing here reads past it.
Every entry the data source reads goes through here: batch and streaming partitions
(read_partition) and the driver's look at a lone Arrow ledger's first entry (arrow_schema_of).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import deque
from collections.abc import Generator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from bookie.malloc_tuning import tune_malloc
from bookie.status import Status
from metadata.offload_record import is_offloaded
from pyspark_ledger.datasource.clients import open_client
from pyspark_ledger.datasource.read import codec
from pyspark_ledger.datasource.read.entry_decode import DecodedRun, decode_blob
from pyspark_ledger.datasource.read.meta_columns import MetaColumns
from pyspark_ledger.datasource.read.planning import LedgerRange
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.ledger.read_handle import ReadHandle
from pyspark_ledger.offload.offloaded_reads import offloaded_entries, open_ledger_file
from pyspark_ledger.protocol.digest import Digest, master_key
from pyspark_ledger.transport.run_response import Run, RunResponse

if TYPE_CHECKING:
    from pyspark_ledger.client import LedgerClient
    from pyspark_ledger.datasource.options.source_options import LedgerSourceOptions

log = logging.getLogger(__name__)

# One window is one range-read RPC (the bookie caps a response at 65,536 entries / 32 MiB).
# Small entries: the byte target binds first (about 51k entries of 100 bytes); in Spark, windows
# that large read 100-byte entries ~10% faster than 16k-entry ones (fewer RPCs and batches).
WINDOW_ENTRIES_MAX = 65_536
WINDOW_BYTES_TARGET = 8 * 2**20
WINDOWS_AHEAD_MAX = 3  # windows fetched ahead of the consumer: memory <= ~4 x WINDOW_BYTES_TARGET
# Windows fetched at once, each from the next replica in turn, so one partition keeps several
# bookie processes busy (and verification overlaps their work).
FETCH_THREADS = 2
READ_RPC_TIMEOUT_S = 30.0
WINDOW_RPCS_MAX = 256  # follow-up reads inside one window (a response may stop at its byte cap)


@dataclass(frozen=True)
class ReadSpec:
    """What every range of one read shares."""

    payload_format: str  # "raw" | "arrow"
    schema: pa.Schema  # the exact output schema Spark expects
    password: bytes


def _status_name(code: int) -> str:
    """A status code from the wire, named (or shown as a number if this client does not know it)."""
    try:
        return Status(code).name
    except ValueError:
        return f"unknown status {code}"


def _window_entries(rng: LedgerRange) -> int:
    """Entries per window from the ledger's average entry size (when known), so a window is one
    RPC of about WINDOW_BYTES_TARGET bytes."""
    meta = rng.metadata
    if meta.is_closed and meta.last_entry_id is not None and meta.last_entry_id >= 0 and meta.length_bytes:
        avg = max(1, meta.length_bytes // (meta.last_entry_id + 1))
        return max(1, min(WINDOW_ENTRIES_MAX, WINDOW_BYTES_TARGET // (avg + 64)))
    return 1_024  # unknown sizes (open ledger): a middle value; byte caps keep responses bounded


class RangeReader:
    """Reads one LedgerRange; one per read() call. Its fetch threads share only the failover
    handle (created under a lock) and the preferred replica (an int: a stale read of it just
    sends one window to a replica that had failed, which fails over again)."""

    def __init__(self, client: LedgerClient, rng: LedgerRange, spec: ReadSpec):
        self.client = client
        self.rng = rng
        self.spec = spec
        meta = rng.metadata
        self.key = (rng.ledger_id.scope_id, rng.ledger_id.id)
        self.digest = Digest.for_ledger(meta.digest_type, spec.password)
        self.master_key = master_key(spec.password)  # reads carry it (bookies with --require-read-auth)
        self.fast = meta.write_quorum_size == meta.ensemble_size
        self.replica = rng.index % len(rng.ensemble)  # spread concurrent partitions over the replicas
        self._handle: ReadHandle | None = None
        self._handle_lock = threading.Lock()
        self.meta = MetaColumns(rng.place)  # the rows' metadata columns, made once (consumer thread only)

    # ---- fetching (pool threads) ----------------------------------------------------------------

    def _slow(self, first: int, last: int) -> list[DecodedRun]:
        """first..last through the client's failover reads (each entry from its write set)."""
        with self._handle_lock:
            if self._handle is None:
                self._handle = ReadHandle(self.client.context, self.rng.metadata, self.rng.metadata_version, self.spec.password)
            handle = self._handle
        payloads = [e.payload for e in handle.read_planned(first, last)]
        if self.spec.payload_format == "raw":
            return [DecodedRun(first, pa.array(payloads, pa.binary()))]
        return [DecodedRun(first, [pa.py_buffer(p) for p in payloads])]

    def _fetch(self, window_no: int, first: int, last: int) -> list[DecodedRun]:
        """Entries first..last, verified, as runs of consecutive entries."""
        if not self.fast:
            return self._slow(first, last)
        runs: list[DecodedRun] = []
        nxt = first
        ensemble = self.rng.ensemble
        for _ in range(WINDOW_RPCS_MAX):
            if nxt > last:
                return runs
            replica = (self.replica + window_no) % len(ensemble)
            bookie = ensemble[replica]
            got, problem = self._read_runs(bookie, nxt, last)
            runs.extend(got)
            nxt += sum(r.count for r in got)
            if problem is None:
                continue
            # Something is wrong with this replica for entry `nxt`: read the rest of the window
            # with per-entry failover, and start later windows at the next replica.
            log.warning("fast read failed over ledger=%s bookie=%s entries=%d..%d problem=%s",
                        self.rng.ledger_id, bookie, nxt, last, problem)
            self.replica = (replica + 1 - window_no) % len(ensemble)
            runs.extend(self._slow(nxt, last))
            return runs
        raise LedgerError(f"ledger {self.rng.ledger_id}: window {first}..{last} needed more than {WINDOW_RPCS_MAX} reads")

    def _read_runs(self, bookie: str, first: int, last: int) -> tuple[list[DecodedRun], str | None]:
        """One run-encoded range read (bookie.proto ReadRequest.entry_runs) of first..last from
        `bookie`: the verified runs from `first` on, and what stopped them (None when the
        answer just ended early, at the bookie's count or byte bound)."""
        try:
            if self.client.pool.faults.drop("read", bookie):  # the client's test seam
                raise LedgerError(f"read to {bookie} dropped")
            resp = self.client.pool.get(bookie).read_runs(
                self.key, first, last, max_entries=last - first + 1, max_bytes=2 * WINDOW_BYTES_TARGET,
                timeout_s=READ_RPC_TIMEOUT_S, master_key=self.master_key,
            )
        except LedgerError as exc:
            return [], str(exc)
        if resp.status != Status.OK:
            return [], f"status {_status_name(resp.status)}"
        return self._decode_answer(resp, first, last)

    def _decode_answer(self, resp: RunResponse, first: int, last: int) -> tuple[list[DecodedRun], str | None]:
        """Verify a run answer's runs in id order from `first`; stop at the first entry that is
        not OK, fails verification, or that the answer skips (a malformed answer)."""
        others = dict(zip(resp.entry_ids, resp.entry_status))  # the entries that are not OK
        out: list[DecodedRun] = []
        nxt = first
        for run in resp.runs:
            if run.first_entry_id != nxt:
                break
            decoded = self._decode(run, last - nxt + 1)
            if decoded.count:
                out.append(decoded)
                nxt += decoded.count
            if decoded.error is not None:
                return out, decoded.error
        if nxt in others:
            return out, f"entry {nxt}: status {_status_name(others[nxt])}"
        answered_to = max([r.first_entry_id + len(r.lengths) - 1 for r in resp.runs] + list(others), default=-1)
        if nxt <= answered_to or nxt == first:
            return out, f"malformed answer: entry {nxt} is missing from it"
        return out, None

    def _decode(self, run: Run, room: int) -> DecodedRun:
        """Verify one EntryRun (at most `room` entries: what was asked for). Raw payloads become
        one contiguous array (the payload column); Arrow ones stay zero-copy views of the
        received message, each opened as an IPC stream."""
        lengths = np.array(run.lengths, dtype=np.int64)
        if len(lengths) > room:
            return DecodedRun(run.first_entry_id, [], f"malformed answer: a run of {len(lengths)} entries, {room} asked for")
        return decode_blob(self.digest, self.key[0], self.key[1], run.first_entry_id, run.data, lengths,
                           views=self.spec.payload_format != "raw")

    # ---- output (the consumer thread) ----------------------------------------------------------------

    def _batches(self, run: DecodedRun) -> Iterator[pa.RecordBatch]:
        place = self.rng.place
        if self.spec.payload_format == "raw":
            yield codec.raw_batch(place, run.first_entry_id, run.payloads, self.spec.schema, meta=self.meta)
            return
        for i, buf in enumerate(run.buffers()):
            entry_id = run.first_entry_id + i
            yield from codec.decode_arrow_entry(buf, place, entry_id, self.spec.schema, *self.rng.rows_of(entry_id),
                                                meta=self.meta)

    def batches(self) -> Iterator[pa.RecordBatch]:
        if self.spec.payload_format != "raw" and is_offloaded(self.rng.metadata):
            yield from self._offloaded_arrow_batches()
            return
        for run in self.runs():
            yield from self._batches(run)

    def _offloaded_runs(self) -> Iterator[DecodedRun]:
        """An OFFLOADED ledger's range straight from its file in the object store, by row group
        (docs/tiered-storage.md): never through a bookie, whose copies may be gone."""
        lf = open_ledger_file(self.rng.metadata)
        first, last = self.rng.first_entry_id, self.rng.last_entry_id
        for g in lf.row_groups_for(first, last):
            lo, hi = lf.facts.row_groups[g]
            entries = list(offloaded_entries(lf, max(lo, first), min(hi, last)))
            if self.spec.payload_format == "raw":
                yield DecodedRun(entries[0].entry_id, pa.array([e.payload for e in entries], pa.binary()))
            else:
                yield DecodedRun(entries[0].entry_id, [pa.py_buffer(e.payload) for e in entries])

    def _offloaded_arrow_batches(self) -> Iterator[pa.RecordBatch]:
        """An offloaded Arrow ledger's rows straight from its Parquet row groups (one per entry),
        without rebuilding IPC streams."""
        lf = open_ledger_file(self.rng.metadata)
        for g in lf.row_groups_for(self.rng.first_entry_id, self.rng.last_entry_id):
            entry_id = lf.facts.row_groups[g][0]
            table = lf.pq.read_row_group(g)
            yield from codec.arrow_entry_batches(table.to_batches(), self.rng.place, entry_id, self.spec.schema,
                                                 *self.rng.rows_of(entry_id), meta=self.meta)

    def runs(self) -> Generator[DecodedRun, None, None]:
        """The range's entries, verified, in order, as runs of consecutive entries."""
        if is_offloaded(self.rng.metadata):
            yield from self._offloaded_runs()
            return
        rng = self.rng
        step = _window_entries(rng)
        windows = [(i, lo, min(rng.last_entry_id, lo + step - 1))
                   for i, lo in enumerate(range(rng.first_entry_id, rng.last_entry_id + 1, step))]
        pool = ThreadPoolExecutor(max_workers=FETCH_THREADS, thread_name_prefix="ledger-fetch")
        ahead: deque[Future[list[DecodedRun]]] = deque()
        try:
            todo = iter(windows)
            for w in todo:
                ahead.append(pool.submit(self._fetch, *w))
                if len(ahead) >= WINDOWS_AHEAD_MAX:
                    break
            while ahead:
                runs = ahead.popleft().result()
                nxt = next(todo, None)
                if nxt is not None:
                    ahead.append(pool.submit(self._fetch, *nxt))
                yield from runs
        finally:
            for f in ahead:
                f.cancel()
            pool.shutdown(wait=True, cancel_futures=True)
            if self._handle is not None:
                self._handle.close()


def read_range(client: LedgerClient, rng: LedgerRange, spec: ReadSpec) -> Iterator[pa.RecordBatch]:
    _tune_malloc_once()
    yield from RangeReader(client, rng, spec).batches()


def arrow_schema_of(client: LedgerClient, rng: LedgerRange, password: bytes) -> pa.Schema:
    """The schema of the Arrow IPC stream in the range's first entry (a lone Arrow ledger records
    its schema nowhere else)."""
    spec = ReadSpec("arrow", pa.schema([]), password)
    runs = RangeReader(client, rng.piece(rng.first_entry_id, rng.first_entry_id), spec).runs()
    try:
        for run in runs:
            for payload in run.buffers():
                return pa.ipc.open_stream(payload).schema
    finally:
        runs.close()  # stops its fetch threads now, not when it is collected
    raise LedgerError(f"ledger {rng.ledger_id}: entry {rng.first_entry_id} was not returned")


def read_partition(opts: LedgerSourceOptions, rng: LedgerRange, spec: ReadSpec) -> Iterator[pa.RecordBatch]:
    """An executor task's read of one range (batch or streaming), with a client of its own that
    is closed when the iterator ends."""
    client = open_client(opts)
    try:
        yield from read_range(client, rng, spec)
    finally:
        client.close()


@functools.cache
def _tune_malloc_once() -> bool:
    # Windows are MiB-sized buffers; see bookie/malloc_tuning.py. Once per worker process.
    return tune_malloc()
