"""Run one offload pass and kill -9 this very process at a named step of the N-th ledger it
offloads (tests/offload/test_offload_kill.py): `python offload_kill_proc.py METADATA_URI STORE_URI
STEP N STALE_MS`. Exits 0 if the pass ended before reaching that step."""

from __future__ import annotations

import os
import signal
import sys

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.offload.offloader import offload_pass


def main() -> int:
    metadata_uri, store_uri, kill_step, nth, stale_ms = sys.argv[1:6]
    seen = [0]

    def step(name: str) -> None:
        if name == kill_step:
            seen[0] += 1
            if seen[0] == int(nth):
                os.kill(os.getpid(), signal.SIGKILL)

    with LedgerClient(metadata_uri, add_timeout_s=10) as client:
        offload_pass(client, store=store_uri, everything=True, stale_ms=int(stale_ms), step=step)
    return 0


if __name__ == "__main__":
    sys.exit(main())
