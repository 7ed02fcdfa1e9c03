"""Autorecovery after a kill -9: the acceptance shape, timed.

5 real bookies on a real ZooKeeper (sessions of 3 s, so a dead bookie's registration goes 3 s
after its death), 200 E3W2A2 ledgers (8 small entries each, every 20th of three 1 MiB entries,
every 40th left OPEN by a dead writer), one `ledger autorecovery` with the default settings but
--lost-bookie-grace-s 3 and --open-ledger-grace-s 1. kill -9 one bookie and measure, from the
service's own Prometheus counters and the metadata:

- time from the kill to every fragment back to W copies (no ledger names the bookie, no mark);
- MB/s and copies/s re-replicated (bytes and entries copied / time from the scan's start to the end);
- metadata requests per second during the audit scan (its CountingStore), and ledgers/s scanned.

--gb N (or LEDGER_REREPLICATION_GB) adds the bulk rounds (tests/autorecovery/bulk_shape.py): a
lost bookie holding N GB of 256 KiB entries, copied at the service's default rate while a writer
runs on the other bookies; reported beside this disk's write-and-fsync bandwidth measured in the
same run (machine_speed.write_fsync_mb_s), the acceptance floor min(50, 0.5 x disk / 3) MB/s, the
writer's adds/s during the copy against without it, and the load average.

--compare-args ARGS runs each bulk round twice, the service with its defaults and with ARGS
(e.g. '--cpu-nice 0'), alternating the order round by round, and prints the two tables.

    python bench/autorecovery_bench.py [--ledgers 200] [--scan-rate 500] [--rounds 1] [--gb 1]
                                       [--compare-args '--cpu-nice 0']
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine_speed import machine_speed_line, write_fsync_mb_s

from metadata.paths import UNDERREPLICATED, audited_bookie_path
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.testing.zookeeper_server import LocalZooKeeper, free_port
from tests.autorecovery.bulk_shape import BulkResult, bulk_round, counters
from tests.autorecovery.cluster_shape import (
    Autorecovery,
    check_every_copy,
    start_cluster,
    under_replicated,
    write_ledgers,
    zk_uri_with_short_sessions,
)

POLL_S = 0.25
WAIT_S_MAX = 600.0


def one_round(zk: LocalZooKeeper, work: Path, n: int, ledgers: int, scan_rate: float) -> dict[str, float]:
    uri = zk_uri_with_short_sessions(zk.uri(f"/bench-{n}"))
    cluster = start_cluster(uri, work / f"cluster-{n}")
    service = None
    try:
        written = write_ledgers(uri, ledgers)
        port = free_port()
        service = Autorecovery(uri, work / f"autorecovery-{n}.log", "--metrics-port", str(port),
                               "--scan-rate", str(scan_rate))
        time.sleep(3)  # the service starts and is elected
        victim = cluster.bookies[0]
        samples: list[tuple[float, dict[str, float]]] = []
        with LedgerClient(uri, add_timeout_s=30) as client:
            killed = time.monotonic()
            victim.kill()
            while True:
                now = time.monotonic()
                samples.append((now - killed, counters(port)))
                got = client.store.get(audited_bookie_path(victim.bookie_id))
                state = json.loads(got.value) if got is not None else {}
                scanned = state.get("state") == "down" and state.get("auditedSinceMs") == state.get("sinceMs")
                if scanned and not client.store.children(UNDERREPLICATED) and not under_replicated(
                        client, written, {victim.bookie_id}):
                    done_s = now - killed
                    break
                if now - killed > WAIT_S_MAX:
                    raise SystemExit(f"not re-replicated within {WAIT_S_MAX:g} s; see {service.log_path}")
                time.sleep(POLL_S)
            copies = check_every_copy(client, written)
        return summarise(samples, done_s, copies, written.bytes_total)
    finally:
        if service is not None:
            service.stop()
        cluster.close()


def summarise(samples: list[tuple[float, dict[str, float]]], done_s: float, copies: int,
              written_bytes: int) -> dict[str, float]:
    """Counters from the kill on (the first sample is the baseline). The scan runs from the sample
    before its request counter first moved to the last sample where it moved."""
    req = "autorecovery_audit_metadata_requests_total"
    base = samples[0][1]
    moved = [t for (t, c), (_, prev) in zip(samples[1:], samples) if c[req] > prev[req]]
    scan_start = (moved[0] - POLL_S) if moved else done_s
    scan_s = max((moved[-1] - scan_start) if moved else 0.0, POLL_S)
    last = {k: v - base[k] for k, v in samples[-1][1].items()}
    copied = last["autorecovery_rereplicated_bytes_total"]
    copy_s = max(done_s - scan_start, 0.001)
    return {"kill_to_replicated_s": done_s, "scan_start_s": scan_start, "scan_s": scan_s,
            "scan_requests": last[req], "requests_per_s": last[req] / scan_s,
            "ledgers_per_s": last["autorecovery_audit_scanned_ledgers_total"] / scan_s,
            "copied_mb": copied / 1e6, "mb_per_s": copied / 1e6 / copy_s,
            "copies": last["autorecovery_rereplicated_entries_total"],
            "copies_per_s": last["autorecovery_rereplicated_entries_total"] / copy_s,
            "ledgers_repaired": last["autorecovery_rereplicated_ledgers_total"], "copies_checked": copies,
            "written_mb": written_bytes / 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ledgers", type=int, default=200)
    ap.add_argument("--scan-rate", type=float, default=500.0, help="the service's --scan-rate (its default: 500)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--gb", type=float, default=float(os.environ.get("LEDGER_REREPLICATION_GB", "0")),
                    help="also run bulk rounds: a lost bookie holding this many GB (default LEDGER_REREPLICATION_GB, "
                         "else none)")
    ap.add_argument("--skip-small", action="store_true", help="only the bulk rounds")
    ap.add_argument("--rereplication-rate-mb-s", type=float, default=None,
                    help="the bulk rounds' service rate (default: the service's default, 50)")
    ap.add_argument("--compare-args", default=None,
                    help="also run every bulk round with these extra service arguments (e.g. '--cpu-nice 0'), "
                         "alternating (each round in the other order), and print both side by side")
    args = ap.parse_args()
    print(machine_speed_line())
    bulk: list[tuple[str, BulkResult, float, tuple[float, ...]]] = []
    with tempfile.TemporaryDirectory(prefix="autorecovery-bench-") as tmp:
        zk = LocalZooKeeper(Path(tmp) / "zk")
        zk.start()
        try:
            results = [] if args.skip_small else [one_round(zk, Path(tmp), n, args.ledgers, args.scan_rate)
                                                  for n in range(args.rounds)]
            variants = [("default", [])] + ([(args.compare_args, args.compare_args.split())] if args.compare_args else [])
            for n in range(args.rounds if args.gb > 0 else 0):
                for label, more in variants if n % 2 == 0 else variants[::-1]:
                    disk_mb_s = write_fsync_mb_s(tmp)  # the same disk, the same run, just before the round
                    work = Path(tmp) / f"bulk-{n}-{len(bulk)}"
                    work.mkdir()
                    extra = ([] if args.rereplication_rate_mb_s is None else [
                        "--rereplication-rate-mb-s", str(args.rereplication_rate_mb_s)]) + more
                    result = bulk_round(zk.uri(f"/bulk-{n}-{len(bulk)}"), work, args.gb, *extra)
                    bulk.append((label, result, disk_mb_s, os.getloadavg()))
                    print(f"round {n} {label}: {result.mb_per_s:.1f} MB/s, writer {result.writer_adds_per_s_during:,.0f}"
                          f" of {result.writer_adds_per_s_without:,.0f} adds/s ({result.writer_ratio:.2f}), load "
                          f"{os.getloadavg()[0]:.1f}", flush=True)
        finally:
            zk.stop()
    if results:
        print_small(args, results)
    for label in dict.fromkeys(label for label, *_ in bulk):
        print_bulk(args.gb, [(r, disk, load) for lb, r, disk, load in bulk if lb == label],
                   args.rereplication_rate_mb_s, "" if label == "default" else label)


def print_small(args: argparse.Namespace, results: list[dict[str, float]]) -> None:
    keys = list(results[0])
    print(f"\n{args.ledgers} ledgers, 5 bookies, E3W2A2, grace 3 s, ZooKeeper session 3 s, scan rate "
          f"{args.scan_rate:g}/s; median of {len(results)} round(s)")
    print(f"{'measure':<24} {'median':>12}  rounds")
    for k in keys:
        values = [r[k] for r in results]
        print(f"{k:<24} {statistics.median(values):>12.2f}  {' '.join(f'{v:.2f}' for v in values)}")


def print_bulk(gb: float, rounds: list[tuple[BulkResult, float, tuple[float, ...]]], rate: float | None,
               more: str) -> None:
    at = ("its default rate (50 MB/s)" if rate is None else f"--rereplication-rate-mb-s {rate:g}") + (
        f" and {more}" if more else "")
    print(f"\nbulk: a lost bookie holding {gb:g} GB (256 KiB entries, E3W3A2), ledger autorecovery at {at}, "
          f"a writer of 1 KiB adds on the other bookies; median of {len(rounds)} round(s)")
    rows: dict[str, list[float]] = {}
    for r, disk_mb_s, load in rounds:
        floor = min(50.0, 0.5 * disk_mb_s / 3)
        for k, v in (("copied_mb", r.copied_mb), ("copy_s", r.copy_s), ("mb_per_s", r.mb_per_s),
                     ("copies_per_s", r.copies_per_s), ("kill_to_replicated_s", r.kill_to_replicated_s),
                     ("disk_write_fsync_mb_s", disk_mb_s), ("floor_mb_s", floor), ("mb_per_s/floor", r.mb_per_s / floor),
                     ("writer_adds_s_without", r.writer_adds_per_s_without),
                     ("writer_adds_s_during", r.writer_adds_per_s_during), ("writer_ratio", r.writer_ratio),
                     ("copies_checked", r.copies_checked), ("load_average_1m", load[0])):
            rows.setdefault(k, []).append(v)
    print(f"{'measure':<24} {'median':>12}  rounds")
    for k, values in rows.items():
        print(f"{k:<24} {statistics.median(values):>12.2f}  {' '.join(f'{v:.2f}' for v in values)}")
    ok_rate = statistics.median(rows["mb_per_s/floor"]) >= 1
    ok_writer = statistics.median(rows["writer_ratio"]) >= 0.7
    print(f"acceptance: copy rate >= floor {'yes' if ok_rate else 'NO'}; writer >= 0.7 of its rate "
          f"{'yes' if ok_writer else 'NO'}")


if __name__ == "__main__":
    main()
