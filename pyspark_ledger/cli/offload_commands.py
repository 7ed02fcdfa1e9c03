"""`ledger offload run|status`: tiered storage from the shell (docs/tiered-storage.md).

    ledger offload run [--log NAME] [--store URI] [--now]   one offload pass (what the elected
        auditor runs on its schedule); --now: every sealed ledger whatever the thresholds;
        --store overrides the cluster setting offload_store
    ledger offload status [--log NAME]                     per log: ledgers offloaded, their
        bytes, ledgers due, and the offload lag
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from pyspark_ledger.cli.output import print_json, print_table
from pyspark_ledger.cli.passwords import add_password_args
from pyspark_ledger.client import LedgerClient


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("offload", help="offload sealed ledgers to the object store, or show what is offloaded")
    osub = p.add_subparsers(dest="offload_command", metavar="ACTION")
    osub.required = True
    r = osub.add_parser("run", help="one offload pass (the elected auditor runs one every --offload-interval-s)")
    r.add_argument("--log", action="append", default=None, metavar="NAME", help="only this log (repeatable)")
    r.add_argument("--store", default=None, metavar="URI",
                   help="file:///dir or s3://bucket/prefix instead of the cluster setting offload_store "
                        "(S3 credentials come from the environment, never from here)")
    r.add_argument("--now", action="store_true", help="every sealed ledger, whatever the log's offload settings")
    add_password_args(r)
    r.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output")
    s = osub.add_parser("status", help="per log: offloaded ledgers and bytes, ledgers due, offload lag")
    s.add_argument("--log", action="append", default=None, metavar="NAME", help="only this log (repeatable)")
    s.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output")


def offload(client: LedgerClient, args: argparse.Namespace) -> int:
    from pyspark_ledger.offload.offloader import offload_pass
    from pyspark_ledger.offload.status import log_offload_status

    if args.offload_command == "run":
        password: bytes = args.password or b""  # resolved by the shell's main (never from argv alone)
        result = offload_pass(client, store=args.store, logs=args.log, everything=args.now,
                              password=lambda _log: password)
        if args.json:
            print_json({"offloaded": [{"log": n, "seq": s} for n, s in result.offloaded],
                        "skipped": [{"log": n, "seq": s, "reason": why} for n, s, why in result.skipped],
                        "bytesOffloaded": result.bytes_offloaded,
                        "objectsDeleted": sum(q.deleted_objects for q in result.queue)})
            return 0
        print(f"offloaded {len(result.offloaded)} ledgers ({result.bytes_offloaded} bytes); skipped "
              f"{len(result.skipped)}; deleted {sum(q.deleted_objects for q in result.queue)} objects nobody reads")
        for n, s, why in result.skipped:
            print(f"  skipped {n} seq {s}: {why}")
        return 0
    now = int(time.time() * 1000)
    rows = [log_offload_status(client, client.describe_log(n), now) for n in (args.log or client.list_logs())]
    if args.json:
        print_json({"logs": [r.to_json() for r in rows]})
        return 0
    print_table(["log", "ledgers", "offloaded", "offloaded bytes", "due", "lag ms"],
                [(r.log, r.ledgers, r.offloaded_ledgers, r.offloaded_bytes, r.due_ledgers, r.lag_ms) for r in rows])
    return 0
