"""A log writer process for takeover runs (pyspark_ledger.testing.takeover): it appends
`acked_first` messages (batched as they fit, then flushed: each acknowledged), says READY, waits
for GO on stdin, then calls append_async for `count` messages of `size` bytes without waiting and
says SENT; it then only prints acknowledgements until it is killed, which may be in the middle of
a batch (open, or sent and unacknowledged). Payloads: fault_check.encode("old", seq, size).

  OPENED <epoch> / ACK <seq> / READY / SENT <n> / ERROR <seq> <error>

Usage: LEDGER_METADATA_URI=URI python -m pyspark_ledger.testing.takeover_writer LOG COUNT SIZE ACKED_FIRST [LINGER_MS]
(the URI, which may carry the ZooKeeper secret, in the environment: never on a command line)
LINGER_MS: the writer's batch_max_delay_ms (default 1); a long one keeps the last batch open, so
the kill lands in the middle of a batch that was never sent.
"""

from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import Future
from functools import partial

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.log import MessageHandle, Position
from pyspark_ledger.testing.fault_check import encode

ADD_TIMEOUT_S = 60.0  # no ensemble change while the test holds bookies stopped
LIFETIME_S = 300.0  # bounded even if nobody kills it
METADATA_URI_ENV = "LEDGER_METADATA_URI"


def main() -> None:
    uri, name = os.environ[METADATA_URI_ENV], sys.argv[1]
    count, size, acked_first = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    out_lock = threading.Lock()

    def say(line: str) -> None:
        with out_lock:
            print(line, flush=True)

    client = LedgerClient(uri, add_timeout_s=ADD_TIMEOUT_S)
    linger_ms = float(sys.argv[5]) if len(sys.argv) > 5 else 1.0
    writer = client.open_log_writer(name, batch_max_delay_ms=linger_ms)
    say(f"OPENED {writer.epoch}")
    first = [writer.append_async(encode("old", seq, size)) for seq in range(acked_first)]
    writer.flush(ADD_TIMEOUT_S)
    for seq, handle in enumerate(first):
        handle.result(timeout=ADD_TIMEOUT_S)
        say(f"ACK {seq}")
    say("READY")
    if sys.stdin.readline().strip() != "GO":
        return

    def report(seq: int, fut: MessageHandle | Future[Position]) -> None:
        exc = fut.exception()
        say(f"ACK {seq}" if exc is None else f"ERROR {seq} {type(exc).__name__}")

    for seq in range(acked_first, acked_first + count):
        writer.append_async(encode("old", seq, size)).add_done_callback(partial(report, seq))
    say(f"SENT {count}")
    threading.Event().wait(LIFETIME_S)


if __name__ == "__main__":
    main()
