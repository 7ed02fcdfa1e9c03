"""A writer process for crash tests: creates a ledger, prints its id, then adds pipelined entries
and prints each acknowledged entry id (after its future resolved) until it is killed."""

from __future__ import annotations

import sys

from pyspark_ledger.client import LedgerClient


def main() -> None:
    uri, ensemble, wq, aq = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    client = LedgerClient(uri, add_timeout_s=5)
    w = client.create_ledger(ensemble, wq, aq)
    print(f"LEDGER {w.ledger_id.id}", flush=True)
    window = []
    i = 0
    while True:
        window.append(w.add_entry_async(b"payload-%d" % i))
        i += 1
        if len(window) >= 64:
            for f in window:
                print(f"ACK {f.result()}", flush=True)
            window = []


if __name__ == "__main__":
    main()
