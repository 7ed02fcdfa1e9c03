"""A log writer process paused (SIGSTOP) for longer than its add timeout, with every bookie
healthy, resumes and keeps appending: the answers that reached its sockets during the pause are
read before anything is judged late (transport.add_streams.AddStream.expire), so its bookies do
not all look failed at once. Every acknowledged entry reads back, in order."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pyspark_ledger.client import LedgerClient
from pyspark_ledger.log import LogReader
from pyspark_ledger.testing.local_cluster import LocalCluster
from pyspark_ledger.testing.process_lines import ProcessLines

REPO = Path(__file__).resolve().parents[2]
ADD_TIMEOUT_S = 3.0
PAUSE_S = 15.0  # five add timeouts: every add in flight is far past its deadline on resume
WAIT_S = 60.0


class _Output(ProcessLines):
    """The writer's stdout lines; a wait fails at once if the writer stopped."""

    def acks(self) -> int:
        return self.count("ACK ")

    def until(self, what: str, predicate) -> None:
        ok = self.wait_for(lambda: predicate() or self.count("STOPPED") > 0, WAIT_S)
        with self.cond:
            stopped = [x for x in self.lines if x.startswith("STOPPED")]
        assert not stopped, f"the writer stopped: {stopped[0]}"
        assert ok, f"{what} not within {WAIT_S:g} s"


def test_a_writer_paused_past_its_add_timeout_resumes_and_keeps_appending(make_cluster) -> None:
    cluster: LocalCluster = make_cluster(4)  # the fault run that found the race had four bookies
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.client.paused_writer_proc", cluster.metadata_uri, "paused", str(ADD_TIMEOUT_S)],
        cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        out = _Output(proc)
        out.until("300 acknowledgements", lambda: out.acks() >= 300)
        os.kill(proc.pid, signal.SIGSTOP)
        time.sleep(PAUSE_S)
        os.kill(proc.pid, signal.SIGCONT)
        resumed_at = out.acks()
        out.until("300 more acknowledgements after the pause", lambda: out.acks() >= resumed_at + 300)
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(timeout=WAIT_S) == 0, out.lines[-5:]
        out.thread.join(WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    acked = out.acks()
    assert out.lines[-1] == "DONE"
    with LedgerClient(cluster.metadata_uri) as client, LogReader(client, "paused") as reader:
        payloads = [e.payload for e in reader.read()]
    # Every acknowledged entry, in order, nothing changed, nothing more (the writer drained its
    # appends before closing the log).
    assert payloads == [b"entry-%d" % n for n in range(acked)]
