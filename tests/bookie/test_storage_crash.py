"""kill -9 at seeded random moments: a child process runs the engine under a sustained add
stream (plus fences and deletes), and appends a line to an ack file only AFTER the engine
acknowledged the operation. The parent kills it, reopens the data directory (sometimes only
after several crashes in a row, so a crash can also land in the middle of a recovery) and
checks that every acknowledged entry reads back with identical bytes, every acknowledged fence
holds and no acknowledged delete is undone.

Replay a failure with STORAGE_TEST_SEED=<seed printed by the test>; STORAGE_CRASH_RUNS sets the
number of kills (default 20).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if __name__ == "__main__":
    sys.path.insert(0, str(REPO))

from bookie.status import Status  # noqa: E402 - run as a script, the repository goes on sys.path first
from bookie.storage import BookieStorage, StorageConfig  # noqa: E402 - after the sys.path set-up
from tests.bookie.test_storage_support import KEY, payload, seeded_rng  # noqa: E402 - after the sys.path set-up

RUNS_ENV = "STORAGE_CRASH_RUNS"
RUNS_DEFAULT = 20
SUBMITTERS = 3
# The child stops by itself after this long if nobody kills it (it always is killed sooner).
CHILD_LIFETIME_MAX_S = 20.0
# The parent waits at most this long for the child to report that the engine is open.
CHILD_READY_TIMEOUT_S = 20.0
# A child's batch callback is waited for at most this long before the submitter gives up.
CHILD_ACK_TIMEOUT_S = 10.0


def run_ledgers(run: int) -> list[tuple[int, int]]:
    return [(run % 3, run * 1000 + k) for k in range(SUBMITTERS)]


def child_config(data_dir: Path, seed: int) -> StorageConfig:
    rng = random.Random(seed)
    return StorageConfig(
        data_dir=data_dir,
        # Checkpoints every few tens of ms, small files: kills land in checkpoints and rolls.
        checkpoint_interval_s=rng.choice([0.02, 0.05, 0.2]),
        journal_file_max_bytes=rng.choice([32 * 1024, 256 * 1024, 4 * 2**20]),
        entry_log_max_bytes=rng.choice([64 * 1024, 1 * 2**20, 64 * 2**20]),
    )


# ---- child ------------------------------------------------------------------------------------


def child_main(data_dir: Path, ack_path: Path, seed: int, run: int) -> None:
    rng = random.Random(seed * 1_000_003 + run)
    ack_fd = os.open(ack_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def ack(line: str) -> None:
        os.write(ack_fd, (line + "\n").encode())  # one small write: all or nothing under kill

    engine = BookieStorage.open(child_config(data_dir, seed + run))
    ack("R")
    deadline = time.monotonic() + CHILD_LIFETIME_MAX_S

    def submitter(ledger: tuple[int, int], r: random.Random) -> None:
        next_id = 0
        step = r.choice([1, 1, 2])  # step 2: this bookie's share of a striped ledger
        while time.monotonic() < deadline:
            count = r.randint(1, 30)
            size = r.choice([None, 16, 700])
            ids = list(range(next_id, next_id + count * step, step))
            next_id += count * step
            done = threading.Event()

            def on_done(status: Status, ids: list[int] = ids, size: int | None = size) -> None:
                if status == Status.OK:
                    ack(f"A {ledger[0]} {ledger[1]} {ids[0]} {len(ids)} {step} {size or 0}")
                done.set()

            entries = [(e, e - step, payload(ledger, e, size)) for e in ids]
            engine.add_batch(ledger, KEY, entries, False, on_done)
            if not done.wait(CHILD_ACK_TIMEOUT_S):
                return
            time.sleep(r.random() * 0.002)

    threads = [threading.Thread(target=submitter, args=(lg, random.Random(rng.random())), daemon=True)
               for lg in run_ledgers(run)]
    for t in threads:
        t.start()
    # Meanwhile fence and delete ledgers of earlier runs.
    earlier = [lg for r in range(run) for lg in run_ledgers(r)]
    while time.monotonic() < deadline:
        time.sleep(rng.random() * 0.05)
        if not earlier:
            continue
        lg = rng.choice(earlier)
        if rng.random() < 0.7:
            status, _lac = engine.fence(lg, KEY)
            if status == Status.OK:
                ack(f"F {lg[0]} {lg[1]}")
        else:
            # An unacknowledged delete may still have become durable before the kill: say
            # it was attempted, so the parent accepts either outcome for this ledger.
            ack(f"d {lg[0]} {lg[1]}")
            if engine.delete_ledger(lg) == Status.OK:
                ack(f"D {lg[0]} {lg[1]}")


# ---- parent -----------------------------------------------------------------------------------


@dataclass
class Acked:
    batches: dict[tuple[int, int], list[tuple[int, int, int, int]]] = field(default_factory=dict)
    fenced: set[tuple[int, int]] = field(default_factory=set)
    deleted: set[tuple[int, int]] = field(default_factory=set)
    delete_attempted: set[tuple[int, int]] = field(default_factory=set)
    entries: int = 0

    def absorb(self, ack_path: Path) -> None:
        raw = ack_path.read_text() if ack_path.exists() else ""
        complete = raw[: raw.rfind("\n") + 1]  # a line cut by the kill was never acknowledged
        for line in complete.splitlines():
            parts = line.split()
            if parts[0] == "A":
                scope, ledger, first, count, step, size = map(int, parts[1:])
                self.batches.setdefault((scope, ledger), []).append((first, count, step, size))
                self.entries += count
            elif parts[0] == "F":
                self.fenced.add((int(parts[1]), int(parts[2])))
            elif parts[0] == "D":
                self.deleted.add((int(parts[1]), int(parts[2])))
            elif parts[0] == "d":
                self.delete_attempted.add((int(parts[1]), int(parts[2])))


def verify(data_dir: Path, acked: Acked) -> None:
    engine = BookieStorage.open(StorageConfig(data_dir=data_dir, checkpoint_interval_s=0.0))
    try:
        assert not engine.uncertain
        for lg in acked.deleted:
            assert engine.ledger_state(lg) is None, f"deleted ledger {lg} came back"
        # A delete that was attempted but not acknowledged may or may not have happened.
        maybe_deleted = {lg for lg in acked.delete_attempted - acked.deleted
                         if engine.ledger_state(lg) is None}
        gone = acked.deleted | maybe_deleted
        for lg in acked.fenced - gone:
            state = engine.ledger_state(lg)
            assert state is not None and state.fenced, f"acknowledged fence of {lg} lost"
        for lg, batches in acked.batches.items():
            if lg in gone:
                continue
            for first, count, step, size in batches:
                last = first + (count - 1) * step
                status, results = engine.read_range(lg, first, last, 10_000, 2**30)
                assert status == Status.OK, (lg, first, status)
                got = {r.entry_id: r for r in results}
                for e in range(first, last + 1, step):
                    r = got[e]
                    assert r.status == Status.OK, f"acked entry {lg}/{e} lost: {r.status.name}"
                    assert r.data == payload(lg, e, size or None), f"acked entry {lg}/{e} changed"
    finally:
        engine.close()


def kill_child(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)  # only ever the child this test started
    proc.wait(timeout=30)


def wait_ready(ack_path: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + CHILD_READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if ack_path.exists() and ack_path.read_bytes().startswith(b"R\n"):
            return
        if proc.poll() is not None:
            raise AssertionError(f"child exited early rc={proc.returncode}: {proc.stderr.read()!r}")
        time.sleep(0.005)
    raise AssertionError("child engine did not open in time")


@pytest.mark.slow
def test_kill_9_at_random_moments_loses_no_acknowledged_write(tmp_path: Path) -> None:
    rng, seed = seeded_rng("test_kill_9_at_random_moments_loses_no_acknowledged_write")
    runs = int(os.environ.get(RUNS_ENV, RUNS_DEFAULT))
    data_dir = tmp_path / "data"
    acked = Acked()
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    verified_runs = 0
    for run in range(runs):
        ack_path = tmp_path / f"acks-{run}.txt"
        proc = subprocess.Popen(
            [sys.executable, __file__, "child", str(data_dir), str(ack_path), str(seed), str(run)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        try:
            if rng.random() < 0.8:
                wait_ready(ack_path, proc)
                time.sleep(rng.uniform(0.05, 0.6))
            else:  # early: may land in the child's recovery (replay, first checkpoint)
                time.sleep(rng.uniform(0.05, 0.4))
        finally:
            kill_child(proc)
        assert proc.returncode == -signal.SIGKILL, (
            f"run {run}: child died by itself rc={proc.returncode}: {proc.stderr.read()!r}"
        )
        proc.stderr.close()
        acked.absorb(ack_path)
        # Sometimes crash again before anyone recovers the directory in between.
        if rng.random() < 0.5 or run == runs - 1:
            verify(data_dir, acked)
            verified_runs += 1
    print(f"crash test: seed={seed} runs={runs} verified={verified_runs} acked_entries={acked.entries} "
          f"fenced={len(acked.fenced)} deleted={len(acked.deleted)}")
    assert acked.entries > 0 and verified_runs >= 1


if __name__ == "__main__" and len(sys.argv) == 6 and sys.argv[1] == "child":
    child_main(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
