"""A small client for mixed-version tests, run with ANOTHER release's python (OldRelease.python).

It uses only the client API every release since 0.1.0 has (LedgerClient, create_ledger,
add_entry, open_ledger, read_entries, open_log_writer, append, open_log_reader, read), so the
same script drives whichever release RELEASES.toml names last. One command per run; it prints
JSON lines (payloads as hex), and `info` says which code it imported, so the test can assert
that the old release's code ran, not the checkout's.

    python release_client.py info
    python release_client.py ledger-write URI N PREFIX            -> {"ledger": name}
    python release_client.py ledger-read URI LEDGER               -> {"payloads": [...]}
    python release_client.py log-append URI LOG N PREFIX          -> {"positions": [...]}
    python release_client.py log-read URI LOG                     -> {"entries": [[position, hex], ...]}
    python release_client.py log-write-until URI LOG PREFIX STOP  -> "ACK <position> <hex>" lines until
                                                                     the file STOP exists
"""

from __future__ import annotations

import json
import os
import sys
import time

import bookie
import metadata
import pyspark_ledger
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.errors import LedgerError

# log-write-until: a writer that fails (a bookie of its ledger stopped for its upgrade, and no
# other to replace it) opens the log again with a new client, as an application would; at most
# this many times, each after at most REOPEN_WAIT_S of retries.
REOPENS_MAX = 50
REOPEN_WAIT_S = 60.0
APPEND_PAUSE_S = 0.005  # a steady trickle, not a benchmark: the machine is shared
# A slow answer on a loaded machine is not a failed bookie (a stopped one fails at once: its
# connections close).
ADD_TIMEOUT_S = 60.0


def emit(obj: object) -> None:
    print(json.dumps(obj), flush=True)


def info() -> None:
    emit({"version": pyspark_ledger.__version__,
          "files": {m.__name__: m.__file__ for m in (bookie, metadata, pyspark_ledger)}})


def ledger_write(uri: str, n: int, prefix: str) -> None:
    with LedgerClient(uri, add_timeout_s=ADD_TIMEOUT_S) as client:
        w = client.create_ledger(3, 3, 2)
        for i in range(n):
            w.add_entry(f"{prefix}-{i}".encode())
        w.close()
        emit({"ledger": w.ledger_id.qualified_name})


def ledger_read(uri: str, ledger: str) -> None:
    with LedgerClient(uri, add_timeout_s=ADD_TIMEOUT_S) as client:
        r = client.open_ledger(ledger)
        last = r.metadata.last_entry_id
        payloads = [e.payload.hex() for e in r.read_entries(0, last)] if last >= 0 else []
        emit({"payloads": payloads})


def log_append(uri: str, name: str, n: int, prefix: str) -> None:
    with LedgerClient(uri, add_timeout_s=ADD_TIMEOUT_S) as client, client.open_log_writer(name) as w:
        emit({"positions": [w.append(f"{prefix}-{i}".encode()).to_json() for i in range(n)]})


def log_read(uri: str, name: str) -> None:
    with LedgerClient(uri, add_timeout_s=ADD_TIMEOUT_S) as client:
        reader = client.open_log_reader(name)
        emit({"entries": [[e.position.to_json(), e.payload.hex()] for e in reader.read()]})
        reader.close()


def log_write_until(uri: str, name: str, prefix: str, stop_file: str) -> None:
    i = 0
    for _ in range(REOPENS_MAX):
        deadline = time.monotonic() + REOPEN_WAIT_S
        while True:  # open, retrying while a bookie is down (bounded)
            client = LedgerClient(uri, add_timeout_s=ADD_TIMEOUT_S)
            try:
                writer = client.open_log_writer(name)
                break
            except LedgerError as exc:
                client.close()
                if time.monotonic() > deadline:
                    raise
                print(f"RETRY {exc}", flush=True)
                time.sleep(0.2)
        try:
            while not os.path.exists(stop_file):
                payload = f"{prefix}-{i}".encode()
                position = writer.append(payload)
                print(f"ACK {json.dumps(position.to_json(), separators=(',', ':'))} {payload.hex()}", flush=True)
                i += 1
                time.sleep(APPEND_PAUSE_S)
            writer.close()
            print("DONE", flush=True)
            return
        except LedgerError as exc:
            print(f"REOPEN {type(exc).__name__}: {exc}", flush=True)
        finally:
            client.close()
    raise SystemExit(f"gave up after {REOPENS_MAX} reopens")


def main(argv: list[str]) -> None:
    command, args = argv[0], argv[1:]
    if command == "info":
        info()
    elif command == "ledger-write":
        ledger_write(args[0], int(args[1]), args[2])
    elif command == "ledger-read":
        ledger_read(args[0], args[1])
    elif command == "log-append":
        log_append(args[0], args[1], int(args[2]), args[3])
    elif command == "log-read":
        log_read(args[0], args[1])
    elif command == "log-write-until":
        log_write_until(args[0], args[1], args[2], args[3])
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
