"""A log writer process for pause tests: appends pipelined windows of entries to a log and prints
`ACK <n>` for each acknowledged one, until its stdin closes (then `DONE`) or an append fails
(then `STOPPED <error>`, exit 3). Payloads are `entry-<n>`, so a reader can check every one."""

from __future__ import annotations

import sys
import threading
from collections import deque

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.log import LogWriter

WINDOW = 64  # appends in flight at any time
ENTRIES_MAX = 500_000  # bounded even if nobody closes stdin


def main() -> None:
    uri, name, add_timeout_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    with LedgerClient(uri, add_timeout_s=add_timeout_s) as client:
        writer = LogWriter(client, name)
        in_flight: deque = deque()
        sent = acked = 0
        try:
            # Always WINDOW appends in flight, so a pause at any moment catches many unanswered.
            while not (stop.is_set() and not in_flight) and acked < ENTRIES_MAX:
                while not stop.is_set() and len(in_flight) < WINDOW:
                    in_flight.append(writer.append_async(b"entry-%d" % sent))
                    sent += 1
                in_flight.popleft().result(timeout=120)
                print(f"ACK {acked}", flush=True)
                acked += 1
        except Exception as exc:  # noqa: BLE001 - the test reads why
            print(f"STOPPED {exc!r}", flush=True)
            sys.exit(3)
        writer.close()
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
