"""Log metadata at scale (issue 19 item 4): cost per commit as one log grows to 1M ledgers.

    python bench/log_scale_bench.py                          # 1k, 10k, 100k, 1M ledgers
    python bench/log_scale_bench.py --scales 1000,10000 --commits 200

One real ZooKeeper (pyspark_ledger.testing.zookeeper_server.LocalZooKeeper, the test fixture's
server and its 256 MiB heap). No bookies: a commit is what the log writer's rollover does to the
metadata, a LogManager.update_head appending one sealed ledger (ledger ids only, no ledger
metadata): one get of the head and one CAS, whatever the log's length.
Reaching 1M ledgers one commit at a time is too slow here, so each scale's log is prefilled with
direct metadata calls: its immutable segments and its head are written as the segmented format
stores them (metadata.log_segments), then `--commits` real commits are measured on top of it.

Per scale: median commit latency, median metadata bytes written per commit (the values of every
create and compare-and-set the commit sent), the most store gets one commit did, ZooKeeper's data
directory size, the time a fresh LogManager takes to open a reader at the tail (the head only),
the time to trim the oldest 90% (one head CAS: trim_seq rises, the trimmed segments become the
deletion queue) and the time to drain that queue's metadata (metadata.log_trim batches: read the
trimmed segments, delete them, move deleted_seq; the ledgers' own deletes are skipped here).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from metadata import log_segments as segs
from metadata import log_trim
from metadata.ids import LedgerId
from metadata.log_record import LogLedger, LogRecord
from metadata.log_segments import LogHead
from metadata.logs import LogManager
from metadata.paths import log_path, log_segment_path
from metadata.store import MetadataStore
from metadata.uri import open_store
from pyspark_ledger.testing.zookeeper_server import LocalZooKeeper


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

        store.create = counted_create
        store.compare_and_set = counted_cas


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


class GetCounter:
    """Counts the store's gets (every record read goes through get)."""

    def __init__(self, store: MetadataStore):
        self.gets = 0
        get = store.get

        def counted_get(path: str):
            self.gets += 1
            return get(path)

        store.get = counted_get


def trim_oldest(logs: LogManager, name: str, fraction: float) -> tuple[float, float, int]:
    """Trim the oldest `fraction` in one head CAS, then drain the deletion queue's metadata (the
    ledgers' own deletes are no-ops here: no bookies). Returns (trim s, drain s, ledgers drained)."""
    head, _ = logs.read_head(name)
    target = int(head.record.next_seq * fraction)
    t0 = time.perf_counter()
    logs.update_head(name, lambda r: r.trimmed_to(target))
    trim_s = time.perf_counter() - t0
    drained = 0
    t0 = time.perf_counter()
    for _ in range(head.record.next_seq // log_trim.DELETE_BATCH_MAX + 2):  # bounded: the queue's batches
        batch = log_trim.next_batch(logs, name)
        if batch is None:
            break
        drained += len(batch.ledgers)
        log_trim.finish_batch(logs, name, batch)
    return trim_s, time.perf_counter() - t0, drained


def measure(zk: LocalZooKeeper, ledgers: int, commits: int) -> dict[str, float]:
    name = f"scale-{ledgers}"
    with open_store(zk.uri("/bench")) as store:
        prefill(store, name, ledgers)
        counter, gets = ByteCounter(store), GetCounter(store)
        logs = LogManager(store)
        lat, written, reads = [], [], []
        for i in range(commits):
            before, got, t0 = counter.bytes, gets.gets, time.perf_counter()
            logs.update_head(name, lambda r, i=i: r.with_ledgers_appended([LedgerId(0, 10_000_000 + i)], [(1, 100)]))
            lat.append(time.perf_counter() - t0)
            written.append(counter.bytes - before)
            reads.append(gets.gets - got)
    with open_store(zk.uri("/bench")) as store:
        fresh = LogManager(store)
        t0 = time.perf_counter()
        tail, _ = fresh.read_tail(name)  # what LogReader does to open at the tail
        open_s = time.perf_counter() - t0
        assert tail.next_seq == ledgers + commits, "the head lost commits"
        trim_s, drain_s, drained = trim_oldest(fresh, name, 0.9)
        assert fresh.read_head(name)[0].deleted_seq == fresh.read_head(name)[0].trim_seq, "queue not drained"
    return {"ledgers": ledgers, "commit_ms": statistics.median(lat) * 1000, "bytes": statistics.median(written),
            "gets": max(reads), "zk_dir_mb": dir_bytes(zk.work_dir / "data") / 2**20, "open_ms": open_s * 1000,
            "trim_s": trim_s, "drain_s": drain_s, "drained": drained}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scales", default="1000,10000,100000,1000000")
    ap.add_argument("--commits", type=int, default=256)  # one full segment cycle of the tail
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="log-scale-") as tmp, LocalZooKeeper(tmp) as zk:
        zk.start()
        print(f"{'ledgers':>9} {'commit ms':>10} {'bytes/commit':>13} {'gets/commit':>12} {'zk dir MiB':>11} "
              f"{'open tail ms':>13} {'trim 90% s':>11} {'queue drain s':>14} {'drained':>8}")
        for n in (int(x) for x in args.scales.split(",")):
            r = measure(zk, n, args.commits)
            rows.append(r)
            print(f"{n:>9} {r['commit_ms']:>10.2f} {r['bytes']:>13.0f} {r['gets']:>12} {r['zk_dir_mb']:>11.1f} "
                  f"{r['open_ms']:>13.1f} {r['trim_s']:>11.3f} {r['drain_s']:>14.1f} {r['drained']:>8}", flush=True)
    if len(rows) > 1:
        print(f"commit latency, largest / smallest scale: {rows[-1]['commit_ms'] / rows[0]['commit_ms']:.2f}x")
        print(f"bytes per commit, largest / smallest scale: {rows[-1]['bytes'] / rows[0]['bytes']:.2f}x")


if __name__ == "__main__":
    main()
