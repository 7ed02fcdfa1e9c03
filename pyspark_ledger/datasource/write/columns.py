"""What a written DataFrame's columns mean: which are stored, which route or key the rows, and
the schema a log records. Checked on the driver before any task runs; a mismatch with a log's
recorded schema names the column and both types. No pyspark here (source.py passes the names,
the type names and the schema as JSON).

    log      string   routes each row to the log it names (like Kafka's `topic` column); never
                      stored. With it, option `log` is refused (write_columns.RoutingError).
    key      binary or string, optional. Raw writes frame it into each entry (keyed_entries.py)
             and the log records (key, payload) as its schema; Arrow writes store it as a column
             like any other. Either way it comes back on read.
    payload  binary: raw writes store it as the entry (one row = one entry).

A raw write ignores the other columns a read adds (seq, ledger, entry, index, timestamp), so a
DataFrame read from a raw log can be written back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from metadata.log_record import LogRecord
from pyspark_ledger.datasource.errors import LedgerUserError, OptionError
from pyspark_ledger.datasource.rows import META_NAMES

ROUTE_COLUMN = "log"
KEY_COLUMN = "key"
PAYLOAD_COLUMN = "payload"
KEY_TYPES = ("binary", "string")
# Columns a raw write ignores: the ones a read adds, besides `log` (which routes).
RAW_IGNORED = tuple(n for n in META_NAMES if n != ROUTE_COLUMN)


class WriteSchemaError(LedgerUserError, ValueError):
    """The DataFrame's columns do not fit the log (or the format): names the column and the types."""


class RoutingError(LedgerUserError, ValueError):
    """A `log` column and option log together, or a row whose log is null or not a valid name."""


@dataclass(frozen=True)
class WriteLayout:
    payload_format: str  # "raw" | "arrow"
    routed: bool  # the DataFrame has a `log` column: each row goes to the log it names
    key_type: str | None  # raw writes with a key column: its type; the key is framed into each entry
    schema_json: str | None  # what the log records: Arrow: the stored columns; raw: (key, payload) or None


def _schema_fields(schema_json: str) -> list[dict[str, Any]]:
    fields = json.loads(schema_json).get("fields", [])
    return fields if isinstance(fields, list) else []


def _dump(fields: list[dict[str, Any]]) -> str:
    # The same spelling as source.log_schema_json, so equal schemas are equal strings.
    return json.dumps({"fields": fields, "type": "struct"}, sort_keys=True, separators=(",", ":"))


# Spark's JSON names that differ from the SQL names users see (printSchema, simpleString).
_SQL_NAMES = {"long": "bigint", "integer": "int", "short": "smallint", "byte": "tinyint"}


def type_name(field: dict[str, Any]) -> str:
    """A field's type as Spark's simpleString spells it (bigint, string, binary; array, struct, ...)."""
    t = field.get("type")
    name = t if isinstance(t, str) else str((t or {}).get("type", t))
    return _SQL_NAMES.get(name, name)


def raw_keyed_schema_json(key_type: str) -> str:
    """The schema a keyed raw log records: the key (as written), then the payload."""
    return _dump([{"metadata": {}, "name": KEY_COLUMN, "nullable": True, "type": key_type},
                  {"metadata": {}, "name": PAYLOAD_COLUMN, "nullable": True, "type": "binary"}])


def _check_raw(names: list[str], types: dict[str, str]) -> str | None:
    """Raw writes: a binary payload, an optional binary/string key; returns the key's type."""
    if PAYLOAD_COLUMN not in names:
        raise OptionError("payloadFormat", f"raw writes store one binary column named payload per entry; the DataFrame "
                          f"has {names}. Select a binary payload column, or write with payloadFormat=arrow")
    if types[PAYLOAD_COLUMN] != "binary":
        raise WriteSchemaError(f"column `payload` is {types[PAYLOAD_COLUMN]} but raw entries are binary: cast it "
                               "(col(\"payload\").cast(\"binary\")), or write with payloadFormat=arrow")
    key_type = types.get(KEY_COLUMN)
    if key_type is not None and key_type not in KEY_TYPES:
        raise WriteSchemaError(f"column `key` is {key_type} but raw keys are binary or string: cast it, or write with "
                               "payloadFormat=arrow")
    extra = [n for n in names if n not in (PAYLOAD_COLUMN, KEY_COLUMN, ROUTE_COLUMN, *RAW_IGNORED)]
    if extra:
        raise OptionError("payloadFormat", f"raw writes store only the payload (and key) column; drop {extra} or "
                          "write with payloadFormat=arrow")
    return key_type


def plan_layout(payload_format: str, names: list[str], types: dict[str, str], schema_json: str,
                log_option: str | None) -> WriteLayout:
    """The layout of a write of a DataFrame with these columns (schema_json: its whole schema)."""
    routed = ROUTE_COLUMN in names
    if routed:
        if types[ROUTE_COLUMN] != "string":
            raise WriteSchemaError(f"column `log` is {types[ROUTE_COLUMN]} but it routes each row to the log it names, "
                                   "so it must be string: cast or rename it")
        if log_option is not None:
            raise RoutingError(f"option log ({log_option!r}) and a `log` column both say where rows go: drop the column "
                               "(df.drop(\"log\")) to write every row to that log, or leave out option log to send each "
                               "row to the log its `log` column names")
    if payload_format == "raw":
        key_type = _check_raw(names, types)
        stored = raw_keyed_schema_json(key_type) if key_type is not None else None
        return WriteLayout("raw", routed, key_type, stored)
    fields = [f for f in _schema_fields(schema_json) if not (routed and f.get("name") == ROUTE_COLUMN)]
    if not fields:
        raise WriteSchemaError("the DataFrame has no column to store besides `log`")
    return WriteLayout("arrow", routed, None, _dump(fields))


# How to get past a log that holds other data: a batch write can replace it, a stream cannot
# (Spark's streaming writes have no overwrite mode), so each is told what it can do.
BATCH_REMEDY = "or use mode overwrite to replace the log"
STREAM_REMEDY = "or write the stream to another log (a stream cannot overwrite one)"


def check_against_log(rec: LogRecord, layout: WriteLayout, remedy: str = BATCH_REMEDY) -> None:
    """Appending to a log with data: the same payload format and recorded schema, or an error
    that names the first column that differs and both types, ending with `remedy`."""
    if not rec.ledgers:
        return
    if rec.payload_format != layout.payload_format:
        raise OptionError("payloadFormat", f"log {rec.name!r} holds {rec.payload_format} entries; cannot append "
                          f"{layout.payload_format} (write with payloadFormat={rec.payload_format}, {remedy})")
    if rec.schema == layout.schema_json:
        return
    if layout.payload_format == "raw" and (rec.schema is None or layout.schema_json is None):
        has = "keyed entries (key, payload)" if rec.schema is not None else "entries without keys"
        fix = "add a binary `key` column" if rec.schema is not None else "drop the `key` column"
        raise WriteSchemaError(f"log {rec.name!r} holds {has}: {fix}, {remedy}")
    raise WriteSchemaError(schema_difference(rec.name, rec.schema or _dump([]), layout.schema_json or _dump([]), remedy))


def schema_difference(log_name: str, log_schema: str, df_schema: str, remedy: str = BATCH_REMEDY) -> str:
    """The first column where the DataFrame's schema and the log's differ, said in one line."""
    theirs = {f["name"]: f for f in _schema_fields(log_schema)}
    ours = {f["name"]: f for f in _schema_fields(df_schema)}
    fix = f"; cast or select the columns to match, {remedy}"
    for name, f in ours.items():
        if name not in theirs:
            return f"column `{name}` ({type_name(f)}) is not in log {log_name!r} (its columns: {list(theirs)}){fix}"
        if f.get("type") != theirs[name].get("type"):
            mine, its = type_name(f), type_name(theirs[name])
            if mine == its:  # nested types that differ inside: show both whole
                mine, its = json.dumps(f.get("type")), json.dumps(theirs[name].get("type"))
            return f"column `{name}` is {mine} but log {log_name!r} holds {its} for it{fix}"
    missing = [n for n in theirs if n not in ours]
    if missing:
        return f"column `{missing[0]}` ({type_name(theirs[missing[0]])}) of log {log_name!r} is missing from the DataFrame{fix}"
    return f"the DataFrame's columns are in another order than log {log_name!r}'s ({list(theirs)}){fix}"
