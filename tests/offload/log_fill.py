"""Logs of sealed ledgers for the offload tests: a raw log whose messages carry keys, event
times and headers (batched), and an Arrow log (one Arrow IPC stream per entry)."""

from __future__ import annotations

import json
import os
import time

import pyarrow as pa

from metadata.cluster_settings import update_cluster_settings
from pyspark_ledger.client import LedgerClient

ARROW_SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
# The same schema as the Spark source records it (datasource/source.py log_schema_json), so that
# `format("ledger")` reads the log too.
ARROW_SCHEMA_JSON = json.dumps({"fields": [{"metadata": {}, "name": "id", "nullable": True, "type": "long"},
                                           {"metadata": {}, "name": "name", "nullable": True, "type": "string"}],
                                "type": "struct"}, sort_keys=True, separators=(",", ":"))


def ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def fill_raw(client: LedgerClient, name: str, ledgers: int, per_ledger: int = 6, payload_bytes: int = 0) -> None:
    """`ledgers` sealed ledgers of `per_ledger` messages, two messages per entry at most; each
    payload padded with random bytes to `payload_bytes` (incompressible, as a real log's may be)."""
    update_cluster_settings(client.store, {"message_batches": True})
    for _ in range(600):  # the client's settings watch catches up within moments; 60 s bound
        if client.cluster_settings.message_batches:
            break
        time.sleep(0.1)
    assert client.cluster_settings.message_batches
    w = client.open_log_writer(name, rollover_entries=(per_ledger + 1) // 2, batch_max_messages=2)
    try:
        for i in range(ledgers * per_ledger):
            head = f"payload-{i}".encode()
            w.append_async(head + os.urandom(max(payload_bytes - len(head), 0)),
                           key=None if i % 3 == 0 else f"k{i % 5}".encode(),
                           timestamp=1_700_000_000_000 + i if i % 2 else None,
                           headers=[("h", f"v{i}".encode()), ("h", b"dup")] if i % 4 == 0 else None)
            if i % 2:
                w.flush()  # two messages per entry: rollover_entries counts whole ledgers exactly
        w.flush()
    finally:
        w.close()


def fill_arrow(client: LedgerClient, name: str, ledgers: int, entries_per_ledger: int = 3) -> None:
    w = client.open_log_writer(name, rollover_entries=entries_per_ledger, batching=False)
    try:
        n = 0
        for _ in range(ledgers * entries_per_ledger):
            rows = pa.table({"id": list(range(n, n + 4)), "name": [f"r{j}" for j in range(n, n + 4)]},
                            schema=ARROW_SCHEMA)
            w.append(ipc(rows))
            n += 4
    finally:
        w.close()
    client.logs.update_head(name, lambda r: r.with_schema(ARROW_SCHEMA_JSON, "arrow"))


def read_all(client: LedgerClient, name: str) -> list[tuple[object, ...]]:
    """Every message of the log with its position and everything the format carries."""
    with client.open_log_reader(name) as r:
        return [(m.position.seq, m.position.ledger_id, m.position.entry_id, m.position.index, m.payload, m.key,
                 m.append_time_ms, m.event_time_ms, m.headers) for m in r.read()]
