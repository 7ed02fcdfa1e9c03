"""Option metadataColumns and user-given schemas (read/columns.py), without a JVM."""

from __future__ import annotations

import pyarrow as pa
import pytest

from pyspark_ledger.datasource.errors import OptionError
from pyspark_ledger.datasource.options.metadata_columns import parse_metadata_columns
from pyspark_ledger.datasource.read.columns import ReadSchemaError, chosen_columns, user_columns
from pyspark_ledger.datasource.rows import META_NAMES, arrow_read_schema

DATA = pa.schema([pa.field("id", pa.int64()), pa.field("timestamp", pa.string())])  # shadows a metadata name


@pytest.mark.parametrize(("text", "names"), [
    (None, META_NAMES), ("all", META_NAMES), ("ALL", META_NAMES), ("none", ()), (" None ", ()),
    ("entry,log", ("log", "entry")), ("index, seq ,ledger", ("seq", "ledger", "index")), ("log,log", ("log",)),
])
def test_the_option_names_columns_in_row_order(text: str | None, names: tuple[str, ...]) -> None:
    assert parse_metadata_columns(text) == names


@pytest.mark.parametrize("text", ["offset", "log,partition", ",", ""])
def test_a_bad_choice_names_the_option_and_the_choices(text: str) -> None:
    with pytest.raises(OptionError, match="metadataColumns.*log, seq, ledger, entry, index, timestamp"):
        parse_metadata_columns(text)


def test_all_is_todays_schema_and_a_subset_keeps_the_renamed_names() -> None:
    assert chosen_columns(DATA, META_NAMES).schema == arrow_read_schema(DATA)
    cols = chosen_columns(DATA, ("entry", "timestamp"))
    assert cols.schema.names == ["id", "timestamp", "entry", "_timestamp"]
    assert cols.output_names() == {"entry": "entry", "timestamp": "_timestamp"}
    six = [pa.array([i]) for i in range(6)]
    assert cols.pick(six) == [six[3], six[5]]
    assert chosen_columns(DATA, ()).schema == DATA


def test_a_user_schema_keeps_its_metadata_columns_in_its_order() -> None:
    user = pa.schema([*DATA, pa.field("index", pa.int32()), pa.field("log", pa.string())])
    cols = user_columns(DATA, user)
    assert cols.schema == user and cols.meta_positions == (4, 0) and cols.meta_names == ("index", "log")


@pytest.mark.parametrize(("fields", "problem"), [
    ([pa.field("id", pa.int64())], "must start with the log's data columns"),
    ([pa.field("id", pa.int32()), pa.field("timestamp", pa.string())], "must start with the log's data columns"),
    ([*DATA, pa.field("offset", pa.int64())], "'offset' is neither"),
    ([*DATA, pa.field("entry", pa.int32())], "'entry' is int64, not int32"),
    ([*DATA, pa.field("seq", pa.int64()), pa.field("seq", pa.int64())], "'seq' is given twice"),
])
def test_a_user_schema_that_does_not_fit_says_why(fields: list[pa.Field], problem: str) -> None:
    with pytest.raises(ReadSchemaError, match=problem):
        user_columns(DATA, pa.schema(fields))
