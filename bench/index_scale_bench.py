"""How the bookie's index holds up with many ledgers: restart time, memory, files on disk.

    python bench/index_scale_bench.py                    # 1k, 10k, 100k ledgers, 4 entries each
    python bench/index_scale_bench.py --ledgers 100000 --entries 4 --entry-bytes 100

For each ledger count, a child process writes every ledger through the storage engine (no gRPC:
the index is what is measured), then either stops cleanly (a checkpoint at close) or is killed
with os._exit right after its last add is durable (a crash: the next start replays the journal).
A fresh child then opens the data directory and reports the time BookieStorage.open took, the
resident memory it added (ru_maxrss after open minus before), and reads one entry of a random
ledger. Files and bytes on disk are counted per top-level directory of the data dir.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bookie.status import Status  # after the path fix-up above
from bookie.storage import BookieStorage, StorageConfig

WAVE_LEDGERS = 500  # ledgers submitted before waiting, so they share group commits
WAIT_S = 60.0
MASTER_KEY = b"k" * 20


def _write(data_dir: Path, ledgers: int, entries: int, entry_bytes: int, crash: bool) -> None:
    storage = BookieStorage.open(StorageConfig(data_dir=data_dir, checkpoint_interval_s=0))
    payload = os.urandom(entry_bytes)
    for first in range(0, ledgers, WAVE_LEDGERS):
        wave = range(first, min(first + WAVE_LEDGERS, ledgers))
        done = threading.Semaphore(0)
        failed: list[Status] = []

        def on_done(status: Status) -> None:
            if status != Status.OK:
                failed.append(status)
            done.release()

        for lid in wave:
            storage.add_batch((0, lid + 1), MASTER_KEY, [(e, e - 1, payload) for e in range(entries)],
                              recovery=False, on_done=on_done, allow_inline=False)
        for _ in wave:
            if not done.acquire(timeout=WAIT_S):
                raise SystemExit(f"an add did not complete within {WAIT_S} s")
        if failed:
            raise SystemExit(f"adds failed: {failed[:3]}")
    if crash:
        os._exit(0)  # no checkpoint, no close: the next open replays the journal
    storage.close()


def _open(data_dir: Path, ledgers: int) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    storage = BookieStorage.open(StorageConfig(data_dir=data_dir, checkpoint_interval_s=0))
    open_s = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    lid = random.randrange(ledgers) + 1
    got = storage.read_entry((0, lid), 0)
    ok = got.status == Status.OK
    storage.close()
    print(json.dumps({"open_s": open_s, "rss_added_mb": (after - before) / 1024, "read_ok": ok}))


def _disk(data_dir: Path) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for top in sorted(p for p in data_dir.iterdir() if p.is_dir()):
        files = [f for f in top.rglob("*") if f.is_file()]
        out[top.name] = (len(files), sum(f.stat().st_size for f in files))
    return out


def _child(*args: str) -> str:
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"child {args[:2]} failed: {proc.stderr[-2000:]}")
    return proc.stdout


def _case(ledgers: int, entries: int, entry_bytes: int, crash: bool, root: Path) -> dict[str, object]:
    data_dir = root / f"{ledgers}-{'crash' if crash else 'clean'}"
    started = time.perf_counter()
    _child("--child-write", str(data_dir), str(ledgers), str(entries), str(entry_bytes), str(int(crash)))
    write_s = time.perf_counter() - started
    disk = _disk(data_dir)
    opened = json.loads(_child("--child-open", str(data_dir), str(ledgers)).strip().splitlines()[-1])
    shutil.rmtree(data_dir, ignore_errors=True)
    return {"ledgers": ledgers, "stop": "kill" if crash else "clean", "write_s": write_s, "disk": disk, **opened}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ledgers", type=int, nargs="*", default=[1_000, 10_000, 100_000])
    ap.add_argument("--entries", type=int, default=4)
    ap.add_argument("--entry-bytes", type=int, default=100)
    ap.add_argument("--dir", type=Path, default=None, help="where data dirs go (default: a temp dir)")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="index-scale-", dir=args.dir))
    rows = []
    try:
        for n in args.ledgers:
            for crash in (False, True):
                rows.append(_case(n, args.entries, args.entry_bytes, crash, root))
                print(f"  done: {n} ledgers, {'kill' if crash else 'clean'} stop", file=sys.stderr)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    dirs = sorted({d for r in rows for d in r["disk"]})
    head = f"{'ledgers':>8} {'stop':>5} {'write s':>8} {'open s':>7} {'RSS +MB':>8} " + " ".join(
        f"{d + ' files/MB':>18}" for d in dirs)
    print(f"bookie index scale: {args.entries} entries of {args.entry_bytes} B per ledger")
    print(head)
    print("-" * len(head))
    for r in rows:
        cells = " ".join(
            f"{r['disk'].get(d, (0, 0))[0]:>9}/{r['disk'].get(d, (0, 0))[1] / 2**20:>8.1f}" for d in dirs)
        print(f"{r['ledgers']:>8} {r['stop']:>5} {r['write_s']:>8.1f} {r['open_s']:>7.2f} {r['rss_added_mb']:>8.1f} {cells}"
              + ("" if r["read_ok"] else "  READ FAILED"))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child-write":
        _write(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6] == "1")
    elif len(sys.argv) > 1 and sys.argv[1] == "--child-open":
        _open(Path(sys.argv[2]), int(sys.argv[3]))
    else:
        main()
