"""A log writer killed (kill -9) with large entries in flight, and a new writer taking over: the
scenario of issue 17's liveness bug, for tests/faults/test_takeover.py and bench/takeover_bench.py.

How entries are put "in flight" (E3 W3 A2 on three bookies, so every bookie is in the ensemble):
1. the writer process appends `acked_first` entries one by one: acknowledged on all three;
2. all bookies but A-1 = 1 are SIGSTOPped: no add can reach A = 2 acknowledgements any more;
3. the writer calls append_async for `count` large entries without waiting: the running bookie
   takes them in, the stopped ones' kernels buffer what fits in their sockets;
4. the writer is killed (kill -9) `settle_s` after it said SENT, then the bookies get SIGCONT:
   they read what their sockets hold, while a new writer fences and recovers the ledger;
5. the new writer's clock runs from the kill to its first acknowledged append (the open fences
   and recovers the previous ledger: read forward over MiB entries, re-replicate, close).
The old writer's acknowledged entries must all read back intact, then the new writer's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.fault_check import FaultCounters, RunRecord, check, encode
from pyspark_ledger.testing.faults import kill9, pause, resume
from pyspark_ledger.testing.local_cluster import LocalBookie
from pyspark_ledger.testing.process_lines import ProcessLines
from pyspark_ledger.testing.takeover_writer import METADATA_URI_ENV

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 60.0


@dataclass
class TakeoverResult:
    takeover_s: float  # kill -> the new writer's first acknowledged append
    open_s: float  # kill -> the new writer opened (fence + recovery of the previous ledger + new ledger)
    acked: list[int]  # the old writer's acknowledged seqs
    sent: bool  # the old writer had called append_async for the whole burst before the kill
    old_in_log: int  # the old writer's entries the log holds after the takeover
    counters: FaultCounters


def run_takeover(client: LedgerClient, bookies: list[LocalBookie], log_name: str, *, count: int, size: int,
                 acked_first: int = 3, settle_s: float = 0.3) -> TakeoverResult:
    """One takeover (see the module doc). `client` is the standby that takes over; `bookies`
    are the three bookies of the cluster (all running)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyspark_ledger.testing.takeover_writer", log_name,
         str(count), str(size), str(acked_first)],
        cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        # The URI (it may carry zk_auth) in the environment, never on the command line.
        env={**os.environ, "PYTHONPATH": str(REPO), METADATA_URI_ENV: client.metadata.uri_with_secrets()},
    )
    out = ProcessLines(proc)
    stopped = [b.proc for b in bookies[1:] if b.proc is not None]
    try:
        if not out.wait("READY", WAIT_S):
            raise RuntimeError(f"the writer did not get {acked_first} acknowledgements: {out.lines[-3:]}")
        for p in stopped:
            pause(p)
        assert proc.stdin is not None
        proc.stdin.write("GO\n")
        proc.stdin.flush()
        sent = out.wait("SENT", bound_s=10.0)
        time.sleep(settle_s)
        kill9(proc)
        killed_at = time.monotonic()
    finally:
        for p in stopped:
            resume(p)
        if proc.poll() is None:
            kill9(proc)
    out.thread.join(WAIT_S)
    acked = out.acked()
    writer = client.open_log_writer(log_name)
    opened_at = time.monotonic()
    writer.append(encode("new", 0, size), timeout_s=WAIT_S)
    took_over_at = time.monotonic()
    writer.close()
    with client.open_log_reader(log_name) as reader:
        entries = [((e.position.seq, e.position.entry_id), e.payload) for e in reader.read()]
    record = RunRecord(writers=["old", "new"], acked={"old": acked, "new": [0]})
    old_in_log = sum(1 for _, p in entries if p.startswith(b"FLT1|old|"))
    return TakeoverResult(took_over_at - killed_at, opened_at - killed_at, acked, sent, old_in_log,
                          check(record, entries))
