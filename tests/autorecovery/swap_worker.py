"""A replication worker that kills itself (SIGKILL) right after one step of a replica swap, for
tests/autorecovery/test_swap_kill.py. Like a worker it claims the ledger's lock first, so the
worker that finishes must wait for the dead one's session to expire.

    python -m tests.autorecovery.swap_worker URI QUALIFIED_NAME LOST_BOOKIE STEP
"""

from __future__ import annotations

import os
import signal
import sys

from metadata import LedgerId
from metadata.ephemeral_lock import try_lock
from metadata.paths import replication_lock_path
from pyspark_ledger.autorecovery.rereplication import rereplicate
from pyspark_ledger.client import LedgerClient


def main(uri: str, qualified_name: str, lost: str, kill_at: str) -> int:
    lid = LedgerId.from_qualified_name(qualified_name)

    def on_step(step: str) -> None:
        if step == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    client = LedgerClient(uri, add_timeout_s=30)
    lock = try_lock(client.store, replication_lock_path(lid), f"swap-worker-{os.getpid()}")
    if lock is None:
        print("the ledger is claimed", file=sys.stderr)
        return 2
    rereplicate(client.context, lid, lost, b"", on_step=on_step, holder=f"swap-worker-{os.getpid()}",
                resume_swaps=True)
    print(f"never reached step {kill_at}", file=sys.stderr)
    return 3


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
