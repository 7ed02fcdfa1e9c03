"""The test process's own view of the logs the Spark side reads and writes: a producer and a
reader through LedgerClient, no Spark involved."""

from __future__ import annotations

from pyspark_ledger.client import LedgerClient

STEP_S = 300.0  # one driver step's answer; the step's own waits are shorter


def produce(client: LedgerClient, name: str, payloads: list[bytes], rollover: int) -> None:
    with client.open_log_writer(name, rollover_entries=rollover, batching=False) as w:
        for f in [w.append_async(p) for p in payloads]:
            f.result(timeout=60)


def log_payloads(client: LedgerClient, name: str) -> list[bytes]:
    with client.open_log_reader(name) as r:
        return [e.payload for e in r.read()]
