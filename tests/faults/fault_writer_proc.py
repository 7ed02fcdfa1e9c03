"""A log writer process for the fault suite. Appends `total` payloads of its own
(pyspark_ledger.testing.fault_check.encode(writer, seq, size)) to a log, `window` appends in
flight at a time, and prints one line per event, flushed:

  SESSION <id> <password hex>   its ZooKeeper session (with a zk:// metadata store), at start
  OPENED <epoch>                 it became the log's writer
  ACK <seq> <ledger seq> <entry> an append was acknowledged
  STALL <seq>                    an append did not end within APPEND_BOUND_S
  STOPPED <error>                an append failed: the writer stops (exit 3)
  DONE                           all appended and the log closed (exit 0)

Usage: python -m tests.faults.fault_writer_proc URI LOG WRITER TOTAL SIZE WINDOW ADD_TIMEOUT_S [PAUSE_S]
PAUSE_S: sleep between windows (a bounded rate, so faults land in the middle of the workload).
"""

from __future__ import annotations

import concurrent.futures
import sys
import time

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.fault_check import encode

APPEND_BOUND_S = 180.0  # one append that takes this long is stuck (the box may be loaded), not slow


def say(line: str) -> None:
    print(line, flush=True)


def main() -> None:
    uri, name, writer_name = sys.argv[1], sys.argv[2], sys.argv[3]
    total, size, window, add_timeout_s = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), float(sys.argv[7])
    pause_s = float(sys.argv[8]) if len(sys.argv) > 8 else 0.0
    client = LedgerClient(uri, add_timeout_s=add_timeout_s)
    kazoo = getattr(client.store, "kazoo_client", None)
    if kazoo is not None:
        session_id, password = kazoo.client_id
        say(f"SESSION {session_id} {password.hex()}")
    writer = client.open_log_writer(name)
    say(f"OPENED {writer.epoch}")
    seq = 0
    try:
        while seq < total:
            batch = [(s, writer.append_async(encode(writer_name, s, size))) for s in range(seq, min(seq + window, total))]
            for s, fut in batch:
                try:
                    pos = fut.result(timeout=APPEND_BOUND_S)
                except concurrent.futures.TimeoutError:
                    say(f"STALL {s}")
                    raise
                say(f"ACK {s} {pos.seq} {pos.entry_id}")
            seq += len(batch)
            time.sleep(pause_s)
        writer.close()
    except Exception as exc:  # noqa: BLE001 - the test reads why and decides
        say(f"STOPPED {type(exc).__name__}: {exc}")
        sys.exit(3)
    finally:
        client.close()
    say("DONE")


if __name__ == "__main__":
    main()
