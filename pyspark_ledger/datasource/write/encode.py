"""A task's record batches -> what its ledgers store, in bulk: raw entries (one per row, the key
framed in front when there is one) and, for a routed write, the rows of each log. Arrow entries
are packed by packer.write/packer.py. No pyspark here, and no per-row Python besides handing
each raw entry to the client (one add per entry).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metadata.errors import InvalidMetadataError
from metadata.paths import check_name
from pyspark_ledger.datasource import keyed_entries
from pyspark_ledger.datasource.errors import LedgerSourceError
from pyspark_ledger.datasource.write.columns import KEY_COLUMN, PAYLOAD_COLUMN, ROUTE_COLUMN, RoutingError


def raw_entries(batch: pa.RecordBatch, keyed: bool) -> list[bytes]:
    """The entries of a raw write: each row's payload, or (keyed) its framed key and payload."""
    payloads = batch.column(batch.schema.get_field_index(PAYLOAD_COLUMN))
    if payloads.null_count:
        raise LedgerSourceError("raw writes need a payload in every row; the payload column has nulls")
    if keyed:
        payloads = keyed_entries.frame(batch.column(batch.schema.get_field_index(KEY_COLUMN)), payloads)
    return payloads.to_pylist()


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
