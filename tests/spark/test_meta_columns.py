"""The cached metadata columns (pyspark_ledger/datasource/read/meta_columns.py) are the columns rows.py makes, batch by batch."""

from __future__ import annotations

import pyarrow as pa
import pytest

from pyspark_ledger.datasource.read import meta_columns
from pyspark_ledger.datasource.read.meta_columns import MetaColumns
from pyspark_ledger.datasource.rows import RowPlace, entry_meta, raw_meta

PLACES = [RowPlace("events", 3, "f" * 32, 1_700_000_000_123), RowPlace(None, None, "0" * 32, 0)]


def table(columns: list[pa.Array]) -> pa.Table:
    return pa.table(columns, names=[f"c{i}" for i in range(len(columns))])


@pytest.mark.parametrize("place", PLACES, ids=["log", "lone ledger"])
def test_cached_columns_equal_fresh_ones_as_batches_grow_and_shrink(place: RowPlace) -> None:
    meta = MetaColumns(place)
    for entry_id, (first_index, n) in enumerate([(0, 10), (0, 8192), (100, 20_000), (5, 3), (0, 0), (60_000, 5_536)]):
        assert table(meta.entry(entry_id, first_index, n)).equals(table(entry_meta(place, entry_id, first_index, n)))
        assert table(meta.raw(entry_id * 1_000, n)).equals(table(raw_meta(place, entry_id * 1_000, n)))


def test_batches_past_the_bound_get_columns_of_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(meta_columns, "CACHED_ROWS_MAX", 100)
    meta = MetaColumns(PLACES[0])
    assert table(meta.entry(7, 50, 60)).equals(table(entry_meta(PLACES[0], 7, 50, 60)))
    assert table(meta.raw(9, 101)).equals(table(raw_meta(PLACES[0], 9, 101)))
    assert meta._rows == 0  # nothing cached past the bound
    meta.raw(9, 100)
    assert meta._rows == 100
