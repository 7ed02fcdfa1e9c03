"""A task's record batches -> what its ledgers store, in bulk: raw entries (one per row, the key
framed in front when there is one; or, batched, message batches of many rows each, batch_pack.py)
and, for a routed write, the rows of each log. Arrow entries are packed by packer.py. No pyspark
here, and no per-row Python besides handing each unbatched raw entry to the client (one add per
entry).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metadata.errors import InvalidMetadataError
from metadata.log_record import widened_times
from metadata.paths import check_name
from pyspark_ledger.datasource import keyed_entries
from pyspark_ledger.datasource.errors import LedgerSourceError
from pyspark_ledger.datasource.write.batch_pack import BatchLimits, Stamps, pack_batches
from pyspark_ledger.datasource.write.columns import HEADERS_COLUMN, KEY_COLUMN, PAYLOAD_COLUMN, ROUTE_COLUMN, RoutingError
from pyspark_ledger.protocol.message_batch import NO_TIME


def raw_entries(batch: pa.RecordBatch, keyed: bool, event_time_column: str | None = None) -> list[bytes]:
    """The entries of a raw write: each row's payload, or (keyed) its framed key and payload.
    An unbatched entry (format 2) has no place for an event time or headers: refused by name."""
    if event_time_column is not None or HEADERS_COLUMN in batch.schema.names:
        raise LedgerSourceError("event times (option eventTimeColumn) and a `headers` column need batched raw writes: "
                                "leave option batching on (the default) and turn the cluster setting message_batches "
                                "on (docs/upgrading.md), or drop them")
    payloads = batch.column(batch.schema.get_field_index(PAYLOAD_COLUMN))
    if payloads.null_count:
        raise LedgerSourceError("raw writes need a payload in every row; the payload column has nulls")
    if keyed:
        payloads = keyed_entries.frame(batch.column(batch.schema.get_field_index(KEY_COLUMN)), payloads)
    return payloads.to_pylist()


class RawBatcher:
    """A task's raw rows -> message batches (entry format 3, batch_pack.py), each key in the
    batch's key column instead of framed into its payload, each row's event time (option
    eventTimeColumn) and headers (a `headers` column) in theirs. The rows of a last, unfilled
    batch wait for the task's next record batch (or flush)."""

    def __init__(self, keyed: bool, limits: BatchLimits, event_time_column: str | None = None):
        self.keyed = keyed
        self.limits = limits
        self.event_time_column = event_time_column
        self._held: tuple[pa.Array, pa.Array | None, Stamps] | None = None  # rows not packed yet
        self.stamped_ms: tuple[int, int] | None = None  # the earliest and latest append time packed (LogLedger)

    def add(self, batch: pa.RecordBatch, append_ms: int) -> list[bytes]:
        payloads = batch.column(batch.schema.get_field_index(PAYLOAD_COLUMN))
        if payloads.null_count:
            raise LedgerSourceError("raw writes need a payload in every row; the payload column has nulls")
        payloads = payloads.cast(pa.binary())
        keys = batch.column(batch.schema.get_field_index(KEY_COLUMN)).cast(pa.binary()) if self.keyed else None
        stamps = row_stamps(batch, self.event_time_column)
        if self._held is not None:  # one copy of what this batch adds to the held rows
            held_p, held_k, held_s = self._held
            payloads = pa.concat_arrays([held_p, payloads])
            keys = pa.concat_arrays([held_k, keys]) if held_k is not None and keys is not None else keys
            stamps = Stamps(np.concatenate([held_s.event_ms, stamps.event_ms])
                            if held_s.event_ms is not None and stamps.event_ms is not None else stamps.event_ms,
                            pa.concat_arrays([held_s.headers, stamps.headers])
                            if held_s.headers is not None and stamps.headers is not None else stamps.headers)
        return self._pack(payloads, keys, stamps, append_ms, hold_last=True)

    def flush(self, append_ms: int) -> list[bytes]:
        if self._held is None:
            return []
        payloads, keys, stamps = self._held
        return self._pack(payloads, keys, stamps, append_ms, hold_last=False)

    def _pack(self, payloads: pa.Array, keys: pa.Array | None, stamps: Stamps, append_ms: int,
              hold_last: bool) -> list[bytes]:
        try:
            entries, used = pack_batches(payloads, keys, append_ms, self.limits, hold_last=hold_last, stamps=stamps)
        except ValueError as exc:  # a header over a bound, a null header key: the user's data
            raise LedgerSourceError(f"raw write: {exc}") from None
        if entries:  # every batch of one call carries its append_ms
            self.stamped_ms = widened_times(self.stamped_ms, append_ms)
        rest = len(payloads) - used
        self._held = None if rest == 0 else (payloads.slice(used), keys.slice(used) if keys is not None else None,
                                             stamps.slice(used))
        return entries


def row_stamps(batch: pa.RecordBatch, event_time_column: str | None) -> Stamps:
    """A raw write's per-row event times (a timestamp column, or bigint ms; null: none) and
    headers (a `headers` column), in bulk."""
    names = batch.schema.names
    headers = batch.column(names.index(HEADERS_COLUMN)) if HEADERS_COLUMN in names else None
    events = None
    if event_time_column is not None:
        col = batch.column(names.index(event_time_column))
        is_time = pa.types.is_timestamp(col.type)  # Spark's: microseconds, UTC
        if is_time:
            col = col.cast(pa.timestamp("us", tz="UTC"))
        events = np.asarray(col.cast(pa.int64()).fill_null(NO_TIME)).astype(np.int64)
        if is_time:
            events = np.where(events == NO_TIME, NO_TIME, events // 1000)
    return Stamps(events, headers)


def arrow_rows(batch: pa.RecordBatch, routed: bool) -> pa.RecordBatch:
    """The columns an Arrow entry stores: all but the routing column."""
    if not routed:
        return batch
    keep = [i for i, name in enumerate(batch.schema.names) if name != ROUTE_COLUMN]
    return pa.RecordBatch.from_arrays([batch.column(i) for i in keep], schema=pa.schema([batch.schema.field(i) for i in keep]))


def _checked_names(names: list[str]) -> list[str]:
    for name in names:
        try:
            check_name("log", name)
        except InvalidMetadataError as exc:
            raise RoutingError(f"column `log` names a log that cannot exist: {exc}") from None
    return names


def split_by_log(batch: pa.RecordBatch) -> list[tuple[str, pa.RecordBatch]]:
    """The rows of each log the `log` column names, in their order, without that column."""
    col = batch.column(batch.schema.get_field_index(ROUTE_COLUMN))
    if col.null_count:
        first = int(np.argmax(np.asarray(col.is_null())))
        raise RoutingError(f"column `log` is null in a row (row {first} of a batch): every row must name its log "
                           "(fill it, e.g. coalesce(col(\"log\"), lit(\"<log>\")), or filter such rows out)")
    rest = arrow_rows(batch, routed=True)
    encoded = pc.dictionary_encode(col)
    names = _checked_names([str(x) for x in encoded.dictionary.to_pylist()])
    if len(names) == 1:
        return [(names[0], rest)]
    indices = np.asarray(encoded.indices)
    order = np.argsort(indices, kind="stable")  # rows of each log together, each log's in order
    counts = np.bincount(indices, minlength=len(names))
    grouped = rest.take(pa.array(order))
    out, at = [], 0
    for name, count in zip(names, counts.tolist()):
        out.append((name, grouped.slice(at, count)))
        at += count
    return out
