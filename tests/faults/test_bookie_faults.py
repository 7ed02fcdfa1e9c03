"""Bookie faults under a writing log, on real bookie processes and a real ZooKeeper: kill -9, a
pause past the add timeout, a partition through the test's proxy, a full disk, a corrupted
replica. The writer (its own process, E3 W3 A2 over four bookies) must carry on to the end of
its workload; everything acknowledged reads back intact, once, in order; a tailing reader never
sees an entry the final log does not hold. `pytest -s` prints the counters."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pyspark_ledger.testing.fault_check import MARKER, FaultCounters
from pyspark_ledger.testing.faults import ProxyMode, corrupt_entry_logs, kill9, paused
from tests.faults.harness import ROUNDS, WAIT_S, FaultCluster, ProxiedBookie, report
from tests.faults.rounds import FAULT_S, Round, Workload, run_round

PARTITION_MODES = (ProxyMode.BLACKHOLE, ProxyMode.DROP, ProxyMode.PAUSE)


def _victim(rnd: Round) -> ProxiedBookie:
    """A bookie the writer is writing to now (the first of its current ensemble)."""
    return rnd.fc.by_id(rnd.fc.current_ensemble(rnd.log_name)[0])


def _assert_moved_off(rnd: Round, victim: ProxiedBookie) -> None:
    """The fault forced an ensemble change while the writer was writing."""
    rnd.fc.wait_moved_off(rnd.log_name, victim.bookie_id, rnd.writers[0])


def _rounds(fc: FaultCluster, kind: str, fault: Callable[[Round, int], None], **kw: Any) -> FaultCounters:
    total = FaultCounters()
    for i in range(ROUNDS):
        counters, outcomes = run_round(fc, kind, lambda rnd, i=i: fault(rnd, i), **kw)
        total.add(counters)
        assert all(o.startswith("DONE") for o in outcomes), f"{kind} round {i}: the writer did not finish: {outcomes}"
        assert not counters.violations(), f"{kind} round {i}: {counters}"
        assert counters.tailed > 0, "the tailing reader saw nothing: past-LAC was not checked"
        fc.ensure_running()
    return total


def test_kill9_bookie(fault_cluster: FaultCluster) -> None:
    started = time.monotonic()

    def fault(rnd: Round, i: int) -> None:
        victim = _victim(rnd)
        assert victim.bookie.proc is not None
        kill9(victim.bookie.proc)
        victim.bookie.proc = None
        _assert_moved_off(rnd, victim)  # it goes on without the bookie
        victim.bookie.start()  # back, with what it had on disk

    counters = _rounds(fault_cluster, "kill9-bookie", fault)
    report("kill -9 of a bookie", {"kill9-bookie": counters}, started)


def test_sigstop_bookie_past_add_timeout(fault_cluster: FaultCluster) -> None:
    started = time.monotonic()

    def fault(rnd: Round, i: int) -> None:
        victim = _victim(rnd)
        assert victim.bookie.proc is not None
        with paused(victim.bookie.proc, FAULT_S):
            pass
        _assert_moved_off(rnd, victim)

    counters = _rounds(fault_cluster, "sigstop-bookie", fault)
    report("SIGSTOP of a bookie past the add timeout", {"sigstop-bookie": counters}, started)


def test_partition_client_bookie_then_heal(fault_cluster: FaultCluster) -> None:
    started = time.monotonic()
    rows: dict[str, FaultCounters] = {}

    def fault(rnd: Round, i: int) -> None:
        victim = _victim(rnd)
        victim.partition(PARTITION_MODES[i % len(PARTITION_MODES)])
        try:
            time.sleep(FAULT_S)
        finally:
            victim.heal()
        _assert_moved_off(rnd, victim)

    for i in range(max(ROUNDS, len(PARTITION_MODES))):  # each mode at least once
        mode = PARTITION_MODES[i % len(PARTITION_MODES)]
        counters, outcomes = run_round(fault_cluster, f"partition-{mode.value}", lambda rnd, i=i: fault(rnd, i))
        rows.setdefault(f"partition-{mode.value}", FaultCounters()).add(counters)
        assert all(o.startswith("DONE") for o in outcomes), f"partition {mode.value}: {outcomes}"
        assert not counters.violations(), f"partition {mode.value}: {counters}"
        assert counters.tailed > 0, "the tailing reader saw nothing: past-LAC was not checked"
    report("partition client <-> bookie through the proxy, then heal", rows, started)


def test_full_disk_bookie_goes_read_only(small_fs_cluster: FaultCluster) -> None:
    """A bookie's tmpfs is filled by a ballast file: to 95% (over its 90% threshold: the disk
    monitor turns it read-only) or to the last byte (its writes fail with ENOSPC: the journal
    failure turns it read-only). Either way it registers read-only and the writer moves on; once
    the ballast is removed it registers writable again and takes adds, with no restart (after
    ENOSPC its journal is reopened: bookie/writable_again.py)."""
    started = time.monotonic()
    fc = small_fs_cluster
    enospc = fc.disk_mode == "enospc"

    def fault(rnd: Round, i: int) -> None:
        victim = _victim(rnd)
        assert victim.fs is not None
        victim.fs.fill(leave_bytes=0 if enospc else victim.fs.size_bytes // 20)
        try:
            _wait_read_only(fc, victim.bookie_id)
            _assert_moved_off(rnd, victim)  # it goes on without the full bookie
        finally:
            victim.fs.drain()
        _wait_registered(fc, victim.bookie_id, read_only=False)
        _assert_takes_adds(fc, victim.bookie_id)

    kind = f"full-disk-{fc.disk_mode}"
    counters = _rounds(fc, kind, fault)
    report(f"full disk on a bookie (tmpfs, {fc.disk_mode})", {kind: counters}, started)


def _wait_read_only(fc: FaultCluster, bookie_id: str, bound_s: float = WAIT_S) -> None:
    _wait_registered(fc, bookie_id, read_only=True, bound_s=bound_s)


def _wait_registered(fc: FaultCluster, bookie_id: str, *, read_only: bool, bound_s: float = WAIT_S) -> None:
    from pyspark_ledger.client import LedgerClient

    deadline = time.monotonic() + bound_s
    with LedgerClient(fc.metadata_uri) as c:
        while time.monotonic() < deadline:
            if any(b.bookie_id == bookie_id for b in c.bookies(writable=not read_only, read_only=read_only)):
                return
            time.sleep(0.1)
    state = "read-only" if read_only else "writable"
    raise AssertionError(f"bookie {bookie_id} did not register {state} within {bound_s:g} s")


def _assert_takes_adds(fc: FaultCluster, bookie_id: str) -> None:
    """A ledger placed on exactly this bookie and two others takes adds and reads them back."""
    from pyspark_ledger.client import LedgerClient

    with LedgerClient(fc.metadata_uri, add_timeout_s=5) as c:
        others = [b.bookie_id for b in c.bookies(read_only=False) if b.bookie_id != bookie_id][:2]
        w = c.create_ledger(3, 3, 3, ensemble=[bookie_id, *others])
        payloads = [b"after the full disk %d" % i for i in range(20)]
        for p in payloads:
            w.add_entry(p)
        w.close()
        meta = c.ledger_metadata(w.ledger_id)
        assert bookie_id in meta.segments[-1].bookies, "the bookie was replaced: it refused adds"
        assert [e.payload for e in c.open_ledger(w.ledger_id).read_entries(0, 19)] == payloads


def test_corrupted_replica_reads_intact_copies(fault_cluster: FaultCluster) -> None:
    """Every entry of the log is corrupted on two of its three bookies (each flipped byte in
    the payload on disk); the read-back must still give every entry intact from the third."""
    started = time.monotonic()
    flipped: list[int] = []

    def no_fault(rnd: Round, i: int) -> None:
        pass

    def corrupt(rnd: Round) -> None:
        two = rnd.fc.current_ensemble(rnd.log_name)[:2]
        for bid in two:
            pb = rnd.fc.by_id(bid)
            pb.bookie.stop()  # graceful: entries checkpointed into the entry logs
            flipped.append(corrupt_entry_logs(pb.bookie.data_dir, MARKER, flip_offset=40))
            pb.bookie.start()

    total = FaultCounters()
    for i in range(ROUNDS):
        counters, outcomes = run_round(fault_cluster, "corrupt-replica", lambda rnd, i=i: no_fault(rnd, i),
                                       Workload(pause_s=0.0), after=corrupt)  # no fault while writing: no pacing
        total.add(counters)
        assert all(o.startswith("DONE") for o in outcomes), outcomes
        assert not counters.violations(), f"corrupt replica round {i}: {counters}"
        assert counters.tailed > 0, "the tailing reader saw nothing: past-LAC was not checked"
    assert min(flipped) > 0, f"nothing was corrupted: {flipped}"
    print(f"entries corrupted per bookie: {flipped}")
    report("corrupted replicas (2 of 3 copies of every entry)", {"corrupt-replica": total}, started)
