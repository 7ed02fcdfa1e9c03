"""The metadata columns (rows.py) of one range's batches, built once and sliced per batch.

Four of the six columns are the same for every row of a range (log, seq, ledger, timestamp) and
`index` counts up within an entry, so they are made once, at the largest batch size seen, and
each batch takes zero-copy slices of them; only `entry` is made per batch. Building all six for
every batch was half of a reading Python worker's CPU for Arrow logs (about 0.13 of 0.27 s per
2M rows of 100 bytes, most of it allocating and filling arrays that hold one value).

Batches larger than CACHED_ROWS_MAX rows (a very large arrowBatchRows) get columns of their own,
so what is kept per range stays bounded. No pyspark here.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from pyspark_ledger.datasource.rows import RowPlace, entry_meta, meta_arrays, raw_meta

# Rows of cached columns kept per range at most: about 64 bytes a row (two strings, four numbers).
CACHED_ROWS_MAX = 65_536
_FIRST_ROWS = 8_192  # the first size made (arrowBatchRows' default), doubled as batches need


class MetaColumns:
    """rows.raw_meta / rows.entry_meta for one range's RowPlace, from cached columns."""

    __slots__ = ("_index", "_log", "_rows", "_ledger", "_seq", "_stamp", "_zeros", "place")

    def __init__(self, place: RowPlace):
        self.place = place
        self._rows = 0  # rows the cached columns hold

    def _hold(self, n: int) -> bool:
        """Have the cached columns hold at least n rows; False when n is past the bound."""
        if n > CACHED_ROWS_MAX:
            return False
        if n > self._rows:
            rows = min(CACHED_ROWS_MAX, max(n, 2 * self._rows, _FIRST_ROWS))
            index = np.arange(rows, dtype=np.int32)
            self._log, self._seq, self._ledger, _, self._index, self._stamp = meta_arrays(
                self.place, np.zeros(rows, dtype=np.int64), index)
            self._zeros = pa.array(np.zeros(rows, dtype=np.int32))
            self._rows = rows
        return True

    def raw(self, first_entry_id: int, n: int) -> list[pa.Array]:
        """Raw entries first_entry_id.. (one row each, index 0)."""
        if not self._hold(n):
            return raw_meta(self.place, first_entry_id, n)
        entries = pa.array(np.arange(first_entry_id, first_entry_id + n, dtype=np.int64))
        return [self._log.slice(0, n), self._seq.slice(0, n), self._ledger.slice(0, n), entries,
                self._zeros.slice(0, n), self._stamp.slice(0, n)]

    def entry(self, entry_id: int, first_index: int, n: int) -> list[pa.Array]:
        """n rows of one Arrow entry, the first being row `first_index` of the entry."""
        if not self._hold(first_index + n):
            return entry_meta(self.place, entry_id, first_index, n)
        entries = pa.array(np.full(n, entry_id, dtype=np.int64))
        return [self._log.slice(0, n), self._seq.slice(0, n), self._ledger.slice(0, n), entries,
                self._index.slice(first_index, n), self._stamp.slice(0, n)]
