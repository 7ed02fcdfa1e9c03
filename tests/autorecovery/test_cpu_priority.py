"""Re-replication at a lower CPU priority (autorecovery/cpu_priority.py): the thread that starts the
service and every thread it starts run niced, threads started before keep their priority, and
`ledger autorecovery` does it by default (its worker threads, read from /proc, on a real ZooKeeper)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from pyspark_ledger.autorecovery.cpu_priority import CPU_NICE_DEFAULT, NICE_MAX, check_cpu_nice, lower_cpu_priority
from pyspark_ledger.cli import main
from tests.autorecovery.cluster_shape import Autorecovery

SERVICE_START_WAIT_S = 120.0


def in_thread(fn: object) -> dict[str, object]:
    """Run `fn(out)` in a thread of its own (niceness is per thread on Linux: the test's own
    thread must not be reniced) and return what it put in `out`."""
    out: dict[str, object] = {}
    t = threading.Thread(target=fn, args=(out,))  # type: ignore[arg-type]  # a callable taking the dict
    t.start()
    t.join(60)
    assert not t.is_alive()
    return out


def test_the_calling_thread_and_its_new_threads_are_niced_the_others_not() -> None:
    mine = os.getpriority(os.PRIO_PROCESS, 0)

    def run(out: dict[str, object]) -> None:
        before = os.getpriority(os.PRIO_PROCESS, 0)
        out["before"] = before
        out["returned"] = lower_cpu_priority(3)
        out["after"] = os.getpriority(os.PRIO_PROCESS, 0)
        child: list[int] = []
        t = threading.Thread(target=lambda: child.append(os.getpriority(os.PRIO_PROCESS, 0)))
        t.start()
        t.join(60)
        out["child"] = child[0]

    out = in_thread(run)
    before = out["before"]
    assert isinstance(before, int)
    expected = min(before + 3, NICE_MAX)
    assert out["after"] == out["returned"] == expected
    assert out["child"] == expected, "a thread started afterwards inherits the niceness"
    assert os.getpriority(os.PRIO_PROCESS, 0) == mine, "the other threads keep theirs"


def test_zero_changes_nothing_and_bad_increments_name_the_flag(tmp_path: Path) -> None:
    out = in_thread(lambda o: o.update(before=os.getpriority(os.PRIO_PROCESS, 0), got=lower_cpu_priority(0),
                                       after=os.getpriority(os.PRIO_PROCESS, 0)))
    assert out["before"] == out["got"] == out["after"]
    assert check_cpu_nice(0, "--cpu-nice") == 0 and check_cpu_nice(NICE_MAX, "--cpu-nice") == NICE_MAX
    for bad in (-1, NICE_MAX + 1):
        with pytest.raises(ValueError, match="--cpu-nice must be in 0..19"):
            check_cpu_nice(bad, "--cpu-nice")
    assert main(["--metadata-uri", f"sqlite://{tmp_path / 'm.db'}", "autorecovery", "--cpu-nice", "20"]) != 0


def thread_nices(pid: int) -> dict[str, int]:
    """Thread name (comm) -> niceness, for every thread of `pid` (stat field 19)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue  # a thread that ended meanwhile
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        out[f"{comm}:{tid}"] = int(stat[stat.rindex(")") + 2:].split()[16])
    return out


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads thread niceness from Linux's /proc")
def test_the_service_runs_its_workers_niced_by_default(zk_uri: str, tmp_path: Path) -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)  # the child starts with ours
    expected = min(base + CPU_NICE_DEFAULT, NICE_MAX)
    service = Autorecovery(zk_uri, tmp_path / "autorecovery.log")
    try:
        deadline = time.monotonic() + SERVICE_START_WAIT_S
        nices: dict[str, int] = {}
        while time.monotonic() < deadline:
            assert service.proc.poll() is None, service.log()[-3000:]
            if "autorecovery running" in service.log():
                nices = thread_nices(service.proc.pid)
                break
            time.sleep(0.2)
        assert nices, f"the service did not start within {SERVICE_START_WAIT_S:g} s"
        niced = [name for name, n in nices.items() if n == expected]
        assert len(niced) >= 5, f"the main thread and the service's workers run at {expected}: {nices}"
        if expected != base:
            assert any(n == base for n in nices.values()), f"the client's earlier threads keep {base}: {nices}"
    finally:
        service.stop()
