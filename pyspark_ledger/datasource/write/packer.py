"""Record batches -> Arrow entries, in bulk: the write side of the Arrow entry format.

A task's record batches are packed into entries of at most `rows_max` rows and about
ENTRY_PAYLOAD_BYTES_TARGET bytes (before compression), each one Arrow IPC stream (schema +
batches, buffers optionally LZ4- or ZSTD-compressed as the IPC format allows), so any single
entry is readable on its own by any Arrow IPC reader (pyspark_ledger/datasource/read/codec.py).
With a clock, each entry's schema carries the time it was packed (protocol/arrow_times.py), never
less than the previous entry's (a search by time bisects a ledger's entries by it).

No pyspark here (pyarrow only).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa

from metadata.log_record import widened_times
from pyspark_ledger.protocol.arrow_times import stamped_schema

# An Arrow entry aims at this size: far below the client's 4 MiB entry limit, large enough
# that the per-entry costs (header, digest, quorum round) vanish next to the bytes.
ENTRY_PAYLOAD_BYTES_TARGET = 2 * 2**20
# Compression must pay for itself (as Arrow C++'s IpcWriteOptions.min_space_savings): an entry
# whose compressed form is not at least this much smaller than its data is stored uncompressed,
# so readers of incompressible data (random, encrypted, already compressed) read it zero-copy
# instead of paying ~25 ns a row for decompressing it. While entries do not compress, the packer
# tries again only every COMPRESSION_RETRY_ENTRIES entries, so their writers stop paying too.
COMPRESSION_SAVINGS_MIN = 0.10
COMPRESSION_RETRY_ENTRIES = 16

class ArrowEntryPacker:
    """Packs incoming record batches into entries: at most rows_max rows and about
    ENTRY_PAYLOAD_BYTES_TARGET bytes each, every entry a complete Arrow IPC stream, compressed
    when that saves at least COMPRESSION_SAVINGS_MIN of its data bytes."""

    def __init__(self, schema: pa.Schema, rows_max: int, compression: str = "none",
                 bytes_target: int = ENTRY_PAYLOAD_BYTES_TARGET, clock_ms: Callable[[], int] | None = None):
        self.schema = schema
        self._clock_ms = clock_ms  # None: entries without an append time (as before times)
        self._last_ms = 0
        self.stamped_ms: tuple[int, int] | None = None  # the earliest and latest time stamped (LogLedger)
        # use_threads=False: Arrow would compress an entry's buffers on its CPU thread pool, and
        # handing a few MiB to pool threads cost 5x the compression itself here (2 cores, each
        # busy with a Spark task or a bookie): 5.3 ms against 1.1 ms for an 8,192-row LZ4 entry.
        self.plain_options = pa.ipc.IpcWriteOptions(compression=None, use_threads=False)
        self.compressed_options = None if compression == "none" else \
            pa.ipc.IpcWriteOptions(compression=compression, use_threads=False)
        self.rows_max = rows_max
        self.bytes_target = bytes_target
        self.entries_compressed = 0
        self.entries_plain = 0
        self._parts: list[pa.RecordBatch] = []
        self._rows = 0
        self._row_cap = rows_max
        self._plain_until_retry = 0  # entries to store plain before trying compression again

    def add(self, batch: pa.RecordBatch) -> Iterator[pa.Buffer]:
        if batch.num_rows == 0:
            return
        if batch.schema != self.schema:
            batch = pa.RecordBatch.from_arrays(batch.columns, schema=self.schema)
        # Rows per entry from this batch's average row size, so an entry stays near the target.
        per_row = max(1, batch.nbytes // batch.num_rows)
        self._row_cap = max(1, min(self.rows_max, self.bytes_target // per_row))
        at = 0
        while at < batch.num_rows:
            take = min(self._row_cap - self._rows, batch.num_rows - at)
            self._parts.append(batch.slice(at, take))
            self._rows += take
            at += take
            if self._rows >= self._row_cap:
                yield self._encode()

    def flush(self) -> Iterator[pa.Buffer]:
        if self._rows:
            yield self._encode()

    def _encode(self) -> pa.Buffer:
        parts, self._parts, self._rows = self._parts, [], 0
        if self.compressed_options is not None and self._plain_until_retry == 0:
            packed = self._write(parts, self.compressed_options)
            data_bytes = sum(p.nbytes for p in parts)  # what the plain entry carries (sliced: exact)
            if packed.size <= (1 - COMPRESSION_SAVINGS_MIN) * data_bytes:
                self.entries_compressed += 1
                return packed
            self._plain_until_retry = COMPRESSION_RETRY_ENTRIES
        elif self._plain_until_retry:
            self._plain_until_retry -= 1
        self.entries_plain += 1
        return self._write(parts, self.plain_options)

    def _write(self, parts: list[pa.RecordBatch], options: pa.ipc.IpcWriteOptions) -> pa.Buffer:
        schema = self.schema
        if self._clock_ms is not None:
            self._last_ms = max(self._last_ms, self._clock_ms())  # a clock stepping back does not
            schema = stamped_schema(schema, self._last_ms)
            self.stamped_ms = widened_times(self.stamped_ms, self._last_ms)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, schema, options=options) as w:
            for part in parts:
                w.write_batch(part)
        return sink.getvalue()
