"""Log metadata at scale (issue 19 item 4): cost per commit as one log grows to 1M ledgers.

    python bench/log_scale_bench.py                          # 1k, 10k, 100k, 1M ledgers
    python bench/log_scale_bench.py --scales 1000,10000 --commits 200

One real ZooKeeper (pyspark_ledger.testing.zookeeper_server.LocalZooKeeper, the test fixture's
server and its 256 MiB heap). No bookies: a commit is what the log writer's rollover does to the
metadata, a LogManager.update appending one sealed ledger (ledger ids only, no ledger metadata).
Reaching 1M ledgers one commit at a time is too slow here, so each scale's log is prefilled with
direct metadata calls: its immutable segments and its head are written as the segmented format
stores them (metadata.log_segments), then `--commits` real commits are measured on top of it.

Per scale: median commit latency and median metadata bytes written per commit (the values of every
create and compare-and-set the commit sent), ZooKeeper's data directory size, the time a fresh
LogManager takes to open a reader at the tail (the head plus the one segment holding the last
positions), and the time to trim the oldest 90% (the whole-segment drop plus clearing the pending
deletions, in steps of --trim-step ledgers so the head's pending deletions stay bounded).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from metadata import log_segments as segs  # noqa: E402
from metadata.ids import LedgerId  # noqa: E402
from metadata.log_record import LogLedger, LogRecord  # noqa: E402
from metadata.log_segments import LogHead  # noqa: E402
from metadata.logs import LogManager  # noqa: E402
from metadata.paths import log_path, log_segment_path  # noqa: E402
from metadata.store import MetadataStore  # noqa: E402
from metadata.uri import open_store  # noqa: E402
from pyspark_ledger.testing.zookeeper_server import LocalZooKeeper  # noqa: E402


class ByteCounter:
    """Counts the bytes of every value written through one store (wraps its write methods)."""

    def __init__(self, store: MetadataStore):
        self.bytes = 0
        create, cas = store.create, store.compare_and_set

        def counted_create(path: str, value: bytes) -> int:
            self.bytes += len(value)
            return create(path, value)

        def counted_cas(path: str, value: bytes, expected_version: int) -> int:
            self.bytes += len(value)
            return cas(path, value, expected_version)

        store.create = counted_create  # type: ignore[method-assign]
        store.compare_and_set = counted_cas  # type: ignore[method-assign]


def prefill(store: MetadataStore, name: str, ledgers: int) -> None:
    """Write `ledgers` sealed ledgers as whole segments plus a head, with direct metadata calls."""
    seg = segs.SEGMENT_LEDGERS
    full = ledgers // seg
    tail = tuple(LogLedger(s, LedgerId(0, 1 + s), 0, 1, 100) for s in range(full * seg, ledgers))
    head = LogHead(LogRecord(name, ledgers=tail, next_seq=ledgers), 0, full, 0)
    # The head first (ZooKeeper would make it an empty parent of the segments); nothing reads the
    # log until the prefill is done.
    store.create(log_path(name), segs.encode_head(head))
    for index in range(full):
        chunk = tuple(LogLedger(s, LedgerId(0, 1 + s), 0, 1, 100) for s in range(index * seg, (index + 1) * seg))
        store.create(log_segment_path(name, index), segs.encode_segment(chunk))


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def trim_oldest(logs: LogManager, name: str, fraction: float, step: int) -> None:
    head, _ = logs.read_head(name)
    target = int(head.record.next_seq * fraction)
    done = head.trim_seq
    while done < target:
        upto = min(done + step, target)
        rec, _ = logs.update(name, lambda r, u=upto: r.without_ledgers({lg.ledger_id for lg in r.ledgers if lg.seq < u}))
        logs.update(name, lambda r: r.without_pending(set(r.pending_deletions)) if r.pending_deletions else None)
        done = upto


def measure(zk: LocalZooKeeper, ledgers: int, commits: int, trim_step: int) -> dict[str, float]:
    name = f"scale-{ledgers}"
    with open_store(zk.uri("/bench")) as store:
        prefill(store, name, ledgers)
        counter = ByteCounter(store)
        logs = LogManager(store)
        lat, written = [], []
        for i in range(commits):
            before, t0 = counter.bytes, time.perf_counter()
            logs.update(name, lambda r, i=i: r.with_ledgers_appended([LedgerId(0, 10_000_000 + i)], [(1, 100)]))
            lat.append(time.perf_counter() - t0)
            written.append(counter.bytes - before)
    with open_store(zk.uri("/bench")) as store:
        fresh = LogManager(store)
        t0 = time.perf_counter()
        head, _ = fresh.read_head(name)
        tail = fresh.sealed_ledgers(name, head, from_seq=head.record.next_seq - 1) + list(head.record.ledgers)
        open_s = time.perf_counter() - t0
        assert tail, "the tail of the log is empty"
        t0 = time.perf_counter()
        trim_oldest(fresh, name, 0.9, trim_step)
        trim_s = time.perf_counter() - t0
    return {"ledgers": ledgers, "commit_ms": statistics.median(lat) * 1000, "bytes": statistics.median(written),
            "zk_dir_mb": dir_bytes(zk.work_dir / "data") / 2**20, "open_ms": open_s * 1000, "trim_s": trim_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scales", default="1000,10000,100000,1000000")
    ap.add_argument("--commits", type=int, default=256)  # one full segment cycle of the tail
    ap.add_argument("--trim-step", type=int, default=16 * segs.SEGMENT_LEDGERS)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="log-scale-") as tmp, LocalZooKeeper(tmp) as zk:
        zk.start()
        print(f"{'ledgers':>9} {'commit ms':>10} {'bytes/commit':>13} {'zk dir MiB':>11} {'open tail ms':>13} {'trim 90% s':>11}")
        for n in (int(x) for x in args.scales.split(",")):
            r = measure(zk, n, args.commits, args.trim_step)
            rows.append(r)
            print(f"{n:>9} {r['commit_ms']:>10.2f} {r['bytes']:>13.0f} {r['zk_dir_mb']:>11.1f} {r['open_ms']:>13.1f} {r['trim_s']:>11.1f}",
                  flush=True)
    if len(rows) > 1:
        print(f"bytes per commit, largest / smallest scale: {rows[-1]['bytes'] / rows[0]['bytes']:.2f}x")


if __name__ == "__main__":
    main()
