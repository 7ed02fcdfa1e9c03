"""One sealed ledger <-> one Parquet file, and back to entries (docs/tiered-storage.md, "Files").

Raw logs: one row per message, columns
    seq int64, ledger string, entry int64, index int32, payload binary, key binary (null: none),
    timestamp timestamp[ms, UTC] (the message's append time; the ledger's join time for an
    unbatched entry, as the Spark source shows it), event_time timestamp[ms, UTC] (null: none),
    headers list<struct<key string, value binary>>, batched bool (the entry was a message batch).
Arrow logs: the log's own columns, one row group per entry, rows in the entry's order.

Every file carries in its key-value metadata the log, the ledger's seq and id, and per row group
the first and last entry it holds, so each row's position (seq, ledger, entry, index) is rebuilt
from the file alone; index is a message's place in its batch (raw) or a row's place in its
entry (Arrow). Rebuilt entries decode to the very messages the ledger held (offload_ledger.py
checks exactly that before anything is recorded). No I/O here but the buffers given.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from metadata.ids import LedgerId
from pyspark_ledger.log.messages import messages
from pyspark_ledger.offload.errors import OffloadedFileError, OffloadRefusedError
from pyspark_ledger.protocol.arrow_times import append_ms_of, stamped_schema
from pyspark_ledger.protocol.entry_format import BATCH_FORMAT_VERSION, FORMAT_VERSION, Entry
from pyspark_ledger.protocol.message_batch import NO_TIME, encode_batch

META_KEY = b"pyspark_ledger.offload"
FILE_FORMAT_VERSION = 1
RAW_ROWS_PER_GROUP_TARGET = 65_536  # raw row groups end at an entry boundary past this many rows
RAW, ARROW = "raw", "arrow"
_HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
_TS = pa.timestamp("ms", tz="UTC")
RAW_SCHEMA = pa.schema([("seq", pa.int64()), ("ledger", pa.string()), ("entry", pa.int64()), ("index", pa.int32()),
                        ("payload", pa.binary()), ("key", pa.binary()), ("timestamp", _TS), ("event_time", _TS),
                        ("headers", pa.list_(_HEADER)), ("batched", pa.bool_())])


@dataclass(frozen=True)
class FileFacts:
    """What a file's metadata says (and what a reader needs to find entries in it)."""

    log: str
    seq: int
    ledger_id: LedgerId
    payload_format: str
    row_groups: tuple[tuple[int, int], ...]  # (first entry, last entry) per row group
    entries: int
    messages: int
    # Arrow: each row group's (entry's) own append time (protocol/arrow_times.py), None for an
    # entry written before times; empty when no entry has one (files written before times).
    entry_times: tuple[int | None, ...] = ()

    def to_bytes(self) -> bytes:
        d = {"version": FILE_FORMAT_VERSION, "log": self.log, "seq": self.seq,
             "ledger": self.ledger_id.qualified_name, "payloadFormat": self.payload_format,
             "rowGroups": [list(g) for g in self.row_groups], "entries": self.entries, "messages": self.messages}
        if any(t is not None for t in self.entry_times):  # a key older readers ignore
            d["arrowEntryTimes"] = list(self.entry_times)
        return json.dumps(d, sort_keys=True).encode()

    def entry_ms(self, group: int) -> int | None:
        """The append time of an Arrow file's row group `group` (one entry), or None."""
        return self.entry_times[group] if self.entry_times else None

    @classmethod
    def from_schema(cls, schema: pa.Schema, where: str) -> FileFacts:
        raw = (schema.metadata or {}).get(META_KEY)
        if raw is None:
            raise OffloadedFileError(f"{where}: not an offloaded ledger file (no {META_KEY.decode()} metadata)")
        try:
            d = json.loads(raw)
            if int(d["version"]) > FILE_FORMAT_VERSION:
                raise OffloadedFileError(f"{where}: file format {d['version']} is newer than this release reads")
            return cls(str(d["log"]), int(d["seq"]), LedgerId.from_qualified_name(d["ledger"]), str(d["payloadFormat"]),
                       tuple((int(a), int(b)) for a, b in d["rowGroups"]), int(d["entries"]), int(d["messages"]),
                       _entry_times(d.get("arrowEntryTimes"), len(d["rowGroups"])))
        except (ValueError, KeyError, TypeError) as exc:
            raise OffloadedFileError(f"{where}: unreadable file metadata: {exc}") from exc


def _entry_times(raw: Any, groups: int) -> tuple[int | None, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) != groups:
        raise ValueError(f"arrowEntryTimes must list one time per row group ({groups}), got {raw!r:.80}")
    return tuple(None if t is None else int(t) for t in raw)


def _raw_rows(seq: int, lid: LedgerId, joined_ms: int, entries: list[Entry]) -> pa.RecordBatch:
    cols: dict[str, list[object]] = {n: [] for n in RAW_SCHEMA.names}
    for e in entries:
        batched = e.format_version == BATCH_FORMAT_VERSION
        for m in messages(seq, lid, e):
            cols["entry"].append(e.entry_id)
            cols["index"].append(m.position.index)
            cols["payload"].append(m.payload)
            cols["key"].append(m.key)
            cols["timestamp"].append(m.append_time_ms if m.append_time_ms is not None else joined_ms)
            cols["event_time"].append(m.event_time_ms)
            cols["headers"].append([{"key": k, "value": v} for k, v in m.headers])
            cols["batched"].append(batched)
    n = len(cols["entry"])
    cols["seq"] = [seq] * n
    cols["ledger"] = [lid.qualified_name] * n
    return pa.RecordBatch.from_pydict(cols, schema=RAW_SCHEMA)


def _arrow_table(e: Entry, where: str) -> pa.Table:
    if e.format_version != FORMAT_VERSION:
        raise OffloadRefusedError(f"{where}: entry {e.entry_id} of an Arrow log is not one Arrow IPC stream")
    return pa.ipc.open_stream(pa.py_buffer(e.payload)).read_all()


def write_ledger_file(log: str, seq: int, lid: LedgerId, payload_format: str, joined_ms: int,
                      entries: Iterable[Entry]) -> tuple[bytes, FileFacts]:
    """The Parquet file of one sealed ledger's entries (in entry order, from 0) and its facts."""
    where = f"log {log!r} ledger {lid}"
    if payload_format not in (RAW, ARROW):
        raise OffloadRefusedError(f"{where}: payload format {payload_format!r} cannot be offloaded")
    groups: list[tuple[int, int]] = []
    times: list[int | None] = []  # Arrow: each entry's own append time
    tables: list[pa.Table] = []
    pending: list[Entry] = []
    count = rows = 0
    expect = 0
    for e in entries:
        if e.entry_id != expect:
            raise OffloadRefusedError(f"{where}: entry {expect} expected, got {e.entry_id}")
        expect += 1
        count += 1
        if payload_format == ARROW:
            t = _arrow_table(e, where)
            groups.append((e.entry_id, e.entry_id))
            times.append(append_ms_of(t.schema, f"{where} entry {e.entry_id}"))
            tables.append(t)
            rows += t.num_rows
            continue
        pending.append(e)
        if _pending_rows(pending) >= RAW_ROWS_PER_GROUP_TARGET:
            batch = _raw_rows(seq, lid, joined_ms, pending)
            groups.append((pending[0].entry_id, pending[-1].entry_id))
            tables.append(pa.Table.from_batches([batch]))
            rows += batch.num_rows
            pending = []
    if pending:
        batch = _raw_rows(seq, lid, joined_ms, pending)
        groups.append((pending[0].entry_id, pending[-1].entry_id))
        tables.append(pa.Table.from_batches([batch]))
        rows += batch.num_rows
    facts = FileFacts(log, seq, lid, payload_format, tuple(groups), count, rows, tuple(times))
    schema = tables[0].schema if tables else RAW_SCHEMA
    for t in tables[1:]:
        if not t.schema.equals(schema):
            raise OffloadRefusedError(f"{where}: entries disagree on their Arrow schema")
    schema = schema.with_metadata({**(schema.metadata or {}), META_KEY: facts.to_bytes()})
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, schema) as w:
        for t in tables:  # one write per group: each becomes exactly one row group
            w.write_table(t.replace_schema_metadata(schema.metadata), row_group_size=max(t.num_rows, 1))
    return sink.getvalue().to_pybytes(), facts


def _pending_rows(pending: list[Entry]) -> int:
    """Rows the pending raw entries make (a batch's count is its first 4 bytes)."""
    return sum(int.from_bytes(e.payload[:4], "big") if e.format_version == BATCH_FORMAT_VERSION else 1
               for e in pending)


class LedgerFile:
    """An offloaded file opened for reading entries back (only the row groups a range needs)."""

    def __init__(self, source: pa.NativeFile | pa.Buffer, where: str):
        self.where = where
        try:
            self.pq = pq.ParquetFile(source if isinstance(source, pa.NativeFile) else pa.BufferReader(source))
        except (OSError, pa.ArrowException) as exc:
            raise OffloadedFileError(f"{where}: not a readable Parquet file: {exc}") from exc
        self.facts = FileFacts.from_schema(self.pq.schema_arrow, where)
        if self.pq.num_row_groups != len(self.facts.row_groups):
            raise OffloadedFileError(f"{where}: {self.pq.num_row_groups} row groups, its metadata names "
                                     f"{len(self.facts.row_groups)}")

    def row_groups_for(self, first: int, last: int) -> list[int]:
        return [i for i, (a, b) in enumerate(self.facts.row_groups) if b >= first and a <= last]

    def entries(self, first: int, last: int) -> Iterator[Entry]:
        """Entries first..last rebuilt (their messages decode as the originals did)."""
        if first < 0 or last >= self.facts.entries:
            raise OffloadedFileError(f"{self.where}: entries {first}..{last} outside 0..{self.facts.entries - 1}")
        for g in self.row_groups_for(first, last):
            table = self.pq.read_row_group(g)
            if self.facts.payload_format == ARROW:
                entry_id = self.facts.row_groups[g][0]
                yield Entry(entry_id, _ipc_stream(table, self.facts.entry_ms(g)), format_version=FORMAT_VERSION)
            else:
                yield from (e for e in _raw_entries(table) if first <= e.entry_id <= last)


def _ipc_stream(table: pa.Table, append_ms: int | None) -> bytes:
    sink = pa.BufferOutputStream()
    schema = table.schema.remove_metadata()
    if append_ms is not None:
        schema = stamped_schema(schema, append_ms)
    with pa.ipc.new_stream(sink, schema) as w:
        for b in table.replace_schema_metadata(None).to_batches():
            w.write_batch(b)
    return sink.getvalue().to_pybytes()


def _raw_entries(table: pa.Table) -> Iterator[Entry]:
    d = table.select(["entry", "payload", "key", "headers", "batched"]).to_pydict()
    d["timestamp"] = table.column("timestamp").cast(pa.int64()).to_pylist()
    d["event_time"] = table.column("event_time").cast(pa.int64()).to_pylist()
    n = len(d["entry"])
    i = 0
    while i < n:
        eid = d["entry"][i]
        j = i
        while j < n and d["entry"][j] == eid:
            j += 1
        if not d["batched"][i]:
            yield Entry(eid, d["payload"][i], format_version=FORMAT_VERSION)
        else:
            yield Entry(eid, _batch(d, i, j), format_version=BATCH_FORMAT_VERSION)
        i = j


def _batch(d: dict[str, list[Any]], i: int, j: int) -> bytes:
    keys = d["key"][i:j]
    events = d["event_time"][i:j]
    headers = d["headers"][i:j]
    return encode_batch(
        [bytes(p) for p in d["payload"][i:j]],
        [int(t) for t in d["timestamp"][i:j]],
        keys=None if all(k is None for k in keys) else keys,
        event_ms=None if all(e is None for e in events) else [NO_TIME if e is None else int(e) for e in events],
        headers=None if not any(headers) else [[(h["key"], h["value"]) for h in hs] for hs in headers],
    )
