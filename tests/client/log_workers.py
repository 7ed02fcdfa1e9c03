"""Processes for the log tests: racing writers and writers that crash at a chosen rollover step."""

from __future__ import annotations

import os
import sys
import time
from multiprocessing.connection import Connection

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.errors import LedgerError

APPEND_WINDOW_S = 0.15


def race_worker(uri: str, name: str, worker: str, conn: Connection) -> None:
    """Each round: open the log as writer (racing the other worker), then append for a short
    window. Reports (round, opened_at or None, [(payload, acked_at)], still_writing)."""
    client = LedgerClient(uri, add_timeout_s=5)
    writer = None
    while True:
        msg = conn.recv()
        if msg == "stop":
            break
        rnd = int(msg)
        acks: list[tuple[bytes, float]] = []
        opened_at = None
        still_writing = False
        error = ""
        try:
            writer = client.open_log_writer(name)
            opened_at = time.monotonic()
            deadline = opened_at + APPEND_WINDOW_S
            i = 0
            while time.monotonic() < deadline:
                payload = f"{worker}-{rnd}-{i}".encode()
                writer.append(payload, timeout_s=30)
                acks.append((payload, time.monotonic()))
                i += 1
            still_writing = True
        except LedgerError as exc:
            error = f"{type(exc).__name__}: {exc}"
        conn.send((rnd, opened_at, acks, still_writing, error))
    client.close()
    conn.send("bye")


def rollover_crash_writer(uri: str, name: str, crash_step: str, entries_before: int) -> None:
    """Append, printing each acknowledged position, then die (SIGKILL) at `crash_step` of a rollover."""
    client = LedgerClient(uri, add_timeout_s=5)

    def hook(step: str) -> None:
        if step == crash_step:
            print(f"CRASH {step}", flush=True)
            os.kill(os.getpid(), 9)

    w = client.open_log_writer(name, rollover_entries=entries_before, crash_hook=hook)
    i = 0
    while True:
        pos = w.append(b"entry-%d" % i)
        print(f"ACK {i} {pos.seq} {pos.entry_id}", flush=True)
        i += 1


if __name__ == "__main__":
    rollover_crash_writer(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
