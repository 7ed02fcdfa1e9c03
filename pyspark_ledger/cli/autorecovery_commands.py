"""`ledger autorecovery`, `ledger listunderreplicated`, `ledger decommissionbookie` and the bookie
states of `ledger listbookies` (docs/autorecovery.md)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from metadata.ephemeral_lock import read_lock
from metadata.paths import BOOKIE_COOKIES, audited_bookie_path, replication_lock_path
from metadata.underreplication import UnderReplicationManager
from pyspark_ledger.autorecovery.bookie_states import DOWN, READ_ONLY, UP, BookieState
from pyspark_ledger.autorecovery.cpu_priority import CPU_NICE_DEFAULT
from pyspark_ledger.cli.output import print_json, print_table

if TYPE_CHECKING:
    from pyspark_ledger.client import LedgerClient

WAIT_TICK_S = 0.5


def _when(ms: int | None) -> str:
    if not ms:
        return ""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("autorecovery", help="run the autorecovery service (auditor candidate and replication "
                                            "workers) until SIGTERM")
    p.add_argument("--lost-bookie-grace-s", type=float, default=30.0,
                   help="a bookie down this long is lost and its fragments re-replicated (default 30)")
    p.add_argument("--scan-rate", type=float, default=500.0,
                   help="ledgers per second the audit scan reads at most (default 500: at most ~1,100 metadata requests/s)")
    p.add_argument("--workers", type=int, default=4,
                   help="replication workers in this process: ledgers copied at once (default 4)")
    p.add_argument("--rereplication-rate-mb-s", type=float, default=50.0,
                   help="MB (10^6 bytes) per second re-replication copies at most, all workers together (default 50)")
    p.add_argument("--cpu-nice", type=int, default=CPU_NICE_DEFAULT,
                   help="add this to the process's CPU niceness, like nice -n: copies yield the cores to running "
                        "writers (0..19; default 10; 0 leaves it as it is)")
    p.add_argument("--open-ledger-grace-s", type=float, default=30.0,
                   help="an OPEN ledger is fenced and closed for re-replication after its mark is this old (default 30)")
    p.add_argument("--no-auditor", action="store_true", help="run workers only, never stand for auditor")
    p.add_argument("--offload-interval-s", type=float, default=60.0,
                   help="the elected auditor offloads sealed ledgers to the cluster's offload_store this often "
                        "(docs/tiered-storage.md; default 60)")
    p.add_argument("--placement-scan-interval-s", type=float, default=3600.0,
                   help="look for ledgers whose write sets span too few racks this often, and whenever a rack "
                        "comes back (default 3600)")
    p.add_argument("--retention-interval-s", type=float, default=60.0,
                   help="the elected auditor applies every log's retention this often (default 60)")
    p.add_argument("--retention-logs-per-pass", type=int, default=1000,
                   help="logs one retention pass visits at most; the next pass goes on from there (default 1000)")
    p.add_argument("--metrics-port", type=int, default=None, help="serve Prometheus metrics on 127.0.0.1:PORT")
    p.add_argument("--exit-with-stdin", action="store_true", help=argparse.SUPPRESS)  # bookie --autorecovery

    p = sub.add_parser("listunderreplicated", help="list ledgers marked under-replicated, and who repairs them")
    p.add_argument("--bookie", help="only ledgers marked for this bookie")

    p = sub.add_parser("decommissionbookie", help="move every fragment off a bookie, then say it may leave")
    p.add_argument("bookie", help="bookie id")
    p.add_argument("--timeout-s", type=float, default=3600.0, help="give up waiting after this long (default 3600)")
    p.add_argument("--scan-rate", type=float, default=500.0, help="ledgers per second the marking scan reads at most")


def autorecovery(client: LedgerClient, args: argparse.Namespace) -> int:
    from pyspark_ledger.autorecovery.cpu_priority import check_cpu_nice, lower_cpu_priority
    from pyspark_ledger.autorecovery.offload_task import OffloadTaskSettings
    from pyspark_ledger.autorecovery.retention_task import RetentionSettings
    from pyspark_ledger.autorecovery.service import AutorecoveryService, AutorecoverySettings
    from pyspark_ledger.log.subscription_source import store_subscriptions

    # A long-running service logs its normal work at INFO, like a bookie; LEDGER_DEBUG adds DEBUG.
    level = logging.DEBUG if os.environ.get("LEDGER_DEBUG") else logging.INFO
    logging.getLogger("pyspark_ledger").setLevel(level)
    logging.getLogger().setLevel(level)
    settings = AutorecoverySettings(lost_bookie_grace_s=args.lost_bookie_grace_s, scan_rate_per_s=args.scan_rate,
                                    workers=args.workers, open_ledger_grace_s=args.open_ledger_grace_s,
                                    rereplication_rate_mb_s=args.rereplication_rate_mb_s,
                                    auditor=not args.no_auditor,
                                    placement_scan_interval_s=args.placement_scan_interval_s,
                                    retention=RetentionSettings(interval_s=args.retention_interval_s,
                                                                logs_per_pass=args.retention_logs_per_pass),
                                    offload=OffloadTaskSettings(interval_s=args.offload_interval_s))
    lower_cpu_priority(check_cpu_nice(args.cpu_nice, "--cpu-nice"))  # before the service's threads start
    service = AutorecoveryService(client.context, settings, logs=client, subscriptions=store_subscriptions(client.store),
                                  offload_client=client)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    if args.exit_with_stdin:  # run by a bookie: its death closes our stdin (even a kill -9)
        def stop_at_stdin_eof() -> None:
            sys.stdin.buffer.read()
            stop.set()

        threading.Thread(target=stop_at_stdin_eof, daemon=True).start()
    if args.metrics_port is not None:
        from pyspark_ledger.autorecovery.subscription_lag import SubscriptionLagCollector, measure

        # The elected process also serves every subscription's lag (docs/subscriptions.md).
        service.metrics.registry.register(SubscriptionLagCollector(lambda: measure(client, None, settings.password),
                                                                   lambda: service.leading))
        port = service.metrics.serve(args.metrics_port)
        print(f"metrics on http://127.0.0.1:{port}/metrics", file=sys.stderr, flush=True)
    service.start()
    print(f"autorecovery running holder={service.holder}", file=sys.stderr, flush=True)
    while not stop.wait(WAIT_TICK_S):
        pass
    service.stop()
    return 0


def listunderreplicated(client: LedgerClient, args: argparse.Namespace) -> int:
    marks = UnderReplicationManager(client.store).list()
    rows: list[dict[str, Any]] = []  # JSON objects, one per marked ledger
    for m in marks:
        if args.bookie and args.bookie not in m.lost_bookies:
            continue
        claim = read_lock(client.store, replication_lock_path(m.ledger_id)) or {}
        rows.append({"ledger": str(m.ledger_id), "qualifiedName": m.ledger_id.qualified_name,
                     "lostBookies": list(m.lost_bookies), "sinceMs": m.since_ms, "since": _when(m.since_ms),
                     "reason": m.reason, "claimedBy": claim.get("holder"),
                     "bookiesDone": claim.get("bookiesDone"), "bookiesTotal": claim.get("bookiesTotal"),
                     "copiedBytes": claim.get("copiedBytes")})
    if args.json:
        print_json(rows)
        return 0
    print_table(["ledger", "lost bookies", "since", "reason", "claimed by", "progress"],
                [(r["ledger"], ",".join(r["lostBookies"]), r["since"], r["reason"], r["claimedBy"] or "",
                  _progress_text(r)) for r in rows])
    print(f"{len(rows)} under-replicated ledger(s)")
    return 0


def _progress_text(r: dict[str, Any]) -> str:
    if r["claimedBy"] is None:
        return "waiting"
    done, total, copied = r["bookiesDone"] or 0, r["bookiesTotal"], r["copiedBytes"] or 0
    return f"{done}/{total if total is not None else '?'} bookies, {copied / 2**20:.1f} MiB copied"


def bookie_rows(client: LedgerClient, *, writable: bool, read_only: bool, down: bool) -> list[dict[str, Any]]:
    """Registered bookies (up or read-only) and, with `down`, bookies with a cookie and no
    registration. since: from the auditor's record when it agrees with the state, else the
    registration time (up), else unknown."""
    infos = {b.bookie_id: b for b in client.bookies()}
    cookies = set(client.store.children(BOOKIE_COOKIES))
    rows = []
    for bookie_id in sorted(set(infos) | cookies):
        info = infos.get(bookie_id)
        state = DOWN if info is None else READ_ONLY if info.read_only else UP
        if not {UP: writable, READ_ONLY: read_only, DOWN: down}[state]:
            continue
        got = client.store.get(audited_bookie_path(bookie_id))
        seen = None if got is None else BookieState.from_bytes(got.value)
        since = seen.since_ms if seen is not None and seen.state == state else (info.registered_ms if info else None)
        rows.append({"bookieId": bookie_id, "address": info.address if info else "",
                     "addAddress": info.add_address if info else "", "readOnly": bool(info and info.read_only),
                     "version": info.version if info else "", "instanceId": info.instance_id if info else "",
                     "state": state, "sinceMs": since, "since": _when(since), "rack": info.rack if info else ""})
    return rows


def listbookies(client: LedgerClient, args: argparse.Namespace) -> int:
    everything = not (args.rw or args.ro)
    rows = bookie_rows(client, writable=not args.ro, read_only=not args.rw, down=everything)
    if args.json:
        print_json(rows)
    else:
        print_table(["bookie", "address", "add address", "rack", "state", "since", "version"],
                    [(r["bookieId"], r["address"], r["addAddress"] or ("" if r["state"] == DOWN else "(gRPC)"),
                      r["rack"] or ("" if r["state"] == DOWN else "-"), r["state"], r["since"], r["version"])
                     for r in rows])
    return 0


def decommissionbookie(client: LedgerClient, args: argparse.Namespace) -> int:
    from pyspark_ledger.autorecovery.decommission import decommission

    result = decommission(client, args.bookie, timeout_s=args.timeout_s, scan_rate_per_s=args.scan_rate,
                          progress=not args.json and sys.stderr.isatty())
    if args.json:
        print_json(result)
    elif result["done"]:
        print(f"bookie {args.bookie} holds no fragment any more ({result['marked']} ledger(s) moved): it may leave "
              f"(stop it, then `bookie --delete-cookie --bookie-id {args.bookie}`)")
    else:
        print(f"bookie {args.bookie}: {result['left']} ledger(s) still on it after {args.timeout_s:g} s; is "
              "`ledger autorecovery` running? (run the command again to keep waiting)", file=sys.stderr)
    return 0 if result["done"] else 1


