"""Executor side of a batch read: one planned range -> Arrow record batches.

The entries come from the ledger room's bulk run reads (pyspark_ledger/ledger/run_reads.py:
replica choice, failover to ReadHandle's per-entry reads, read repair and digest checks, all in
one place, verified by the entry format's run decoder); this module only cuts a range into
windows of about WINDOW_BYTES_TARGET, fetches them ahead of the consumer with a small pool
(bounded: WINDOWS_AHEAD_MAX), so bookie I/O, verification and Spark's socket writes overlap, and
turns the runs into Arrow batches (codec.py).

An OFFLOADED ledger's ranges come from its Parquet file in the object store, by row group
(pyspark_ledger/offload), never from a bookie.

The planner already bounded every range by the LAC or last entry, so nothing here reads past it.
Every entry the data source reads goes through here: batch and streaming partitions
(read_partition) and the driver's look at a lone Arrow ledger's first entry (arrow_schema_of).
"""

from __future__ import annotations

import functools
import logging
from collections import deque
from collections.abc import Generator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from bookie.malloc_tuning import tune_malloc
from metadata.offload_record import is_offloaded
from pyspark_ledger.datasource.clients import lease_client
from pyspark_ledger.datasource.read import codec
from pyspark_ledger.datasource.read.batch_unpack import grouped, unpack_entry
from pyspark_ledger.datasource.read.columns import ReadColumns
from pyspark_ledger.datasource.read.meta_columns import MetaColumns
from pyspark_ledger.datasource.read.planning import LedgerRange
from pyspark_ledger.datasource.read.time_filter import TimeFilter
from pyspark_ledger.datasource.worker_gc import freeze_after_first_task
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.ledger.run_reads import RunReads
from pyspark_ledger.offload.offloaded_reads import offloaded_entries, open_ledger_file
from pyspark_ledger.protocol.entry_format import BATCH_FORMAT_VERSION, entry_format_of_ledger
from pyspark_ledger.protocol.entry_runs import DecodedRun

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


@dataclass(frozen=True)
class ReadSpec:
    """What every range of one read shares."""

    payload_format: str  # "raw" | "arrow"
    schema: pa.Schema  # the exact output schema Spark expects
    password: bytes
    columns: ReadColumns | None = None  # which of the schema's columns are data, which metadata (None: all six)
    # Claimed timestamp conditions (pushFilters), applied here to rows with times of their own:
    # planning kept their ledgers by recorded times only (read/time_filter.py). None: none.
    times: TimeFilter | None = None

    @property
    def read_columns(self) -> ReadColumns:
        return codec.all_columns(self.schema, self.columns)


def _window_entries(rng: LedgerRange) -> int:
    """Entries per window from the ledger's average entry size (when known), so a window is one
    RPC of about WINDOW_BYTES_TARGET bytes."""
    meta = rng.metadata
    if meta.is_closed and meta.last_entry_id is not None and meta.last_entry_id >= 0 and meta.length_bytes:
        avg = max(1, meta.length_bytes // (meta.last_entry_id + 1))
        return max(1, min(WINDOW_ENTRIES_MAX, WINDOW_BYTES_TARGET // (avg + 64)))
    return 1_024  # unknown sizes (open ledger): a middle value; byte caps keep responses bounded


class RangeReader:
    """Reads one LedgerRange; one per read() call. Its fetch threads share the run reads (which
    are thread-safe)."""

    def __init__(self, client: LedgerClient, rng: LedgerRange, spec: ReadSpec):
        self.rng = rng
        self.spec = spec
        self.columns = spec.read_columns
        # The ledger's entry format (its custom metadata): format 3 holds message batches.
        self.batched = entry_format_of_ledger(rng.metadata.custom) == BATCH_FORMAT_VERSION
        if self.batched and spec.payload_format != "raw":
            raise LedgerError(f"ledger {rng.ledger_id} holds message batches (entry format 3), not Arrow entries")
        # Concurrent partitions start at different replicas (rng.index spreads them). Raw payloads
        # come out contiguous (the payload column as it is); Arrow entries and batches as
        # zero-copy views, each opened on its own.
        self.reads = RunReads(client.context, rng.metadata, rng.metadata_version, spec.password,
                              views=spec.payload_format != "raw" or self.batched,
                              first_replica=rng.index % len(rng.ensemble), max_bytes=2 * WINDOW_BYTES_TARGET)
        self.meta = MetaColumns(rng.place)  # the rows' metadata columns, made once (consumer thread only)

    # ---- output (the consumer thread) ----------------------------------------------------------------

    def _batches(self, run: DecodedRun) -> Iterator[pa.RecordBatch]:
        place = self.rng.place
        if self.batched:
            where = f"ledger {self.rng.ledger_id} entry"
            entries = (unpack_entry(buf, run.first_entry_id + i, *self.rng.rows_of(run.first_entry_id + i),
                                    where=f"{where} {run.first_entry_id + i}")
                       for i, buf in enumerate(run.buffers()))
            for rows in grouped(entries):
                batch = codec.batched_raw_batch(place, rows, self.columns, meta=self.meta, times=self.spec.times)
                if batch.num_rows:
                    yield batch
            return
        if self.spec.payload_format == "raw":
            yield codec.raw_batch(place, run.first_entry_id, run.payloads, self.spec.schema, meta=self.meta,
                                  columns=self.columns)
            return
        for i, buf in enumerate(run.buffers()):
            entry_id = run.first_entry_id + i
            yield from codec.decode_arrow_entry(buf, place, entry_id, self.spec.schema, *self.rng.rows_of(entry_id),
                                                meta=self.meta, columns=self.columns, times=self.spec.times)

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
                                                 *self.rng.rows_of(entry_id), meta=self.meta, columns=self.columns,
                                                 entry_ms=lf.facts.entry_ms(g), times=self.spec.times)

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
                ahead.append(pool.submit(self.reads.read, *w))
                if len(ahead) >= WINDOWS_AHEAD_MAX:
                    break
            while ahead:
                runs = ahead.popleft().result()
                nxt = next(todo, None)
                if nxt is not None:
                    ahead.append(pool.submit(self.reads.read, *nxt))
                yield from runs
        finally:
            for f in ahead:
                f.cancel()
            pool.shutdown(wait=True, cancel_futures=True)
            self.reads.close()


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
    """An executor task's read of one range (batch or streaming), with the worker's client
    (clients.py: leased until the iterator ends)."""
    freeze_after_first_task()  # worker_gc: what the first task left for the worker's lifetime
    with lease_client(opts) as client:
        yield from read_range(client, rng, spec)


@functools.cache
def _tune_malloc_once() -> bool:
    # Windows are MiB-sized buffers; see bookie/malloc_tuning.py. Once per worker process.
    return tune_malloc()
