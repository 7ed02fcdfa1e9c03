"""Writer faults on real processes: the log writer process SIGSTOPped past its add timeout (it
must resume and finish its workload: issue 17's transport race made it stop), and its
ZooKeeper session expired (a new writer then takes over; the old one must stop cleanly, fenced,
and nothing it had acknowledged may be lost). `pytest -s` prints the counters."""

from __future__ import annotations

import time

from pyspark_ledger.testing.fault_check import FaultCounters
from pyspark_ledger.testing.faults import expire_zk_session, paused
from pyspark_ledger.testing.zookeeper_server import LocalZooKeeper
from tests.faults.harness import ROUNDS, WAIT_S, FaultCluster, WriterProcess, report
from tests.faults.rounds import FAULT_S, Round, Workload, run_round

FENCED_ERRORS = ("LogFencedError", "LogWriterStoppedError", "LedgerFencedError")


def _wait_logged(writer: WriterProcess, text: str, bound_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + bound_s
    while text not in writer.stderr_tail(10**7):
        assert time.monotonic() < deadline, f"writer {writer.writer} never logged {text!r}"
        time.sleep(0.1)


def test_sigstop_writer_past_add_timeout(fault_cluster: FaultCluster) -> None:
    started = time.monotonic()
    total = FaultCounters()

    def fault(rnd: Round) -> None:
        writer = rnd.writers[0]
        with paused(writer.proc, FAULT_S):
            pass
        acked_at_resume = len(writer.acked())
        writer.wait_acks(acked_at_resume + 100)  # it resumed and keeps appending

    for i in range(ROUNDS):
        counters, outcomes = run_round(fault_cluster, "sigstop-writer", fault)
        total.add(counters)
        assert outcomes[0].startswith("DONE"), f"round {i}: the paused writer did not finish: {outcomes}"
        assert not counters.violations(), f"round {i}: {counters}"
        assert counters.tailed > 0, "the tailing reader saw nothing: past-LAC was not checked"
    report("SIGSTOP of the writer past its add timeout", {"sigstop-writer": total}, started)


def test_zk_session_expiry_of_the_writer_then_takeover(fault_cluster: FaultCluster, zk_server: LocalZooKeeper) -> None:
    """The writer's session is expired from outside (kazoo: a second client joins the session
    and closes it). The log's writer is not an ephemeral lock but an epoch in the log record,
    so the old writer may go on appending on a new session until a new writer bumps the epoch;
    from then on its appends fail fenced. Writer b takes over while a is still writing."""
    started = time.monotonic()
    total = FaultCounters()

    def fault(rnd: Round) -> None:
        old = rnd.writers[0]
        session_id, password = old.session()
        expire_zk_session(zk_server.hosts, session_id, password)
        acked_at_expiry = len(old.acked())
        old.wait_acks(acked_at_expiry + 50)  # the expiry alone does not stop it
        _wait_logged(old, "ZooKeeper session expired")  # the fault did happen
        new = rnd.start_writer("b", total=800)
        new.wait_acks(1)

    workload = Workload(total=4000, pause_s=0.01)  # a outlives b's takeover
    for i in range(ROUNDS):
        counters, outcomes = run_round(fault_cluster, "zk-expiry", fault, workload)
        total.add(counters)
        old, new = outcomes
        assert old.startswith("STOPPED") and any(e in old for e in FENCED_ERRORS), \
            f"round {i}: the old writer did not stop fenced: {old}"
        assert new.startswith("DONE"), f"round {i}: the new writer did not finish: {new}"
        assert not counters.violations(), f"round {i}: {counters}"
        assert counters.tailed > 0, "the tailing reader saw nothing: past-LAC was not checked"
    report("ZooKeeper session expiry of the writer, then a new writer", {"zk-expiry": total}, started)
