"""`ledger bookieinfo [BOOKIE]` and `ledger triggergc BOOKIE`: a bookie's storage as its admin
RPCs report it (bookie/admin.py): per directory used and capacity, and once the storage has a
garbage collector, live and dead bytes, last GC and compaction; GC and compaction on demand."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from bookie.proto import bookie_pb2 as pb
from bookie.status import Status
from pyspark_ledger.cli.no_bookies import NoBookieRunningError
from pyspark_ledger.cli.output import Progress, print_json, print_table
from pyspark_ledger.errors import LedgerError

if TYPE_CHECKING:
    from pyspark_ledger.client import LedgerClient

ADMIN_RPC_TIMEOUT_S = 30.0
# triggergc waits at most this long for the whole run (the bookie ends its stream by then too).
TRIGGER_GC_TIMEOUT_S = 3700.0


def _registered(client: LedgerClient, bookie_id: str) -> str:
    if not any(b.bookie_id == bookie_id for b in client.bookies()):
        raise LedgerError(f"bookie {bookie_id} is not registered")
    return bookie_id


def _stats(client: LedgerClient, bookie_id: str) -> pb.StorageStatsResponse:
    # Through the client's pool: its TLS settings and operator secret (docs/security.md) apply.
    return client.pool.get(_registered(client, bookie_id)).storage_stats(timeout_s=ADMIN_RPC_TIMEOUT_S)


def _opt(msg: Any, field: str) -> Any:
    return getattr(msg, field) if msg.HasField(field) else None


def stats_json(r: pb.StorageStatsResponse) -> dict[str, Any]:
    """Fields the bookie does not report (no garbage collector yet) are null."""
    return {
        "bookieId": r.bookie_id, "readOnly": r.read_only, "journalFailed": r.journal_failed,
        "journalReopens": r.journal_reopens, "entryLogCount": r.entry_log_count, "gcAvailable": r.gc_available,
        "lastGcUnixS": _opt(r, "last_gc_unix_s"), "lastCompactionUnixS": _opt(r, "last_compaction_unix_s"),
        "reclaimedBytes": _opt(r, "reclaimed_bytes"), "compactionRuns": _opt(r, "compaction_runs"),
        "directories": [{"path": d.path, "role": d.role, "usedBytes": d.used_bytes, "capacityBytes": d.capacity_bytes,
                         "storedBytes": d.stored_bytes, "liveBytes": _opt(d, "live_bytes"),
                         "deadBytes": _opt(d, "dead_bytes")} for d in r.directories],
    }


def _when(unix_s: float | None) -> str:
    if unix_s is None:
        return "n/a"
    return datetime.fromtimestamp(unix_s, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _mib(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**20:.1f} MiB"


def bookieinfo(client: LedgerClient, args: argparse.Namespace) -> int:
    ids = [args.bookie] if args.bookie else [b.bookie_id for b in client.bookies()]
    if not ids:  # an empty table and success would read as "all fine"
        raise NoBookieRunningError()
    reports = [_stats(client, b) for b in ids]
    if args.json:
        print_json([stats_json(r) for r in reports])
        return 0
    rows = []
    for r in reports:
        state = "journal failed" if r.journal_failed else "read-only" if r.read_only else "writable"
        for d in r.directories:
            rows.append((r.bookie_id, state, d.role, d.path, _mib(d.used_bytes), _mib(d.capacity_bytes),
                         f"{100 * d.used_bytes / d.capacity_bytes:.1f}%" if d.capacity_bytes else "n/a",
                         _mib(d.stored_bytes), _mib(_opt(d, "live_bytes")), _mib(_opt(d, "dead_bytes"))))
    print_table(["bookie", "state", "dir", "path", "used", "capacity", "use", "stored", "live", "dead"], rows)
    for r in reports:
        print(f"{r.bookie_id}: entry logs {r.entry_log_count}, last GC {_when(_opt(r, 'last_gc_unix_s'))}, "
              f"last compaction {_when(_opt(r, 'last_compaction_unix_s'))}, journal reopens {r.journal_reopens}"
              + ("" if r.gc_available else " (no garbage collector on this bookie yet)"))
    return 0


def triggergc(client: LedgerClient, args: argparse.Namespace) -> int:
    bookie = client.pool.get(_registered(client, args.bookie))
    bar: Progress | None = None
    last: pb.GcProgress | None = None
    for msg in bookie.trigger_gc(timeout_s=TRIGGER_GC_TIMEOUT_S):
        last = msg
        if msg.finished:
            break
        if bar is None or bar.label != msg.phase:
            if bar is not None:
                bar.done()
            bar = Progress(msg.phase or "gc", msg.total or None, quiet=args.json)
        bar.update(msg.done)
    if bar is not None:
        bar.done()
    if last is None or not last.finished:
        raise LedgerError(f"bookie {args.bookie} ended the GC stream without a result")
    ok = last.status == int(Status.OK)
    reclaimed = _opt(last, "reclaimed_bytes")
    if args.json:
        print_json({"bookieId": args.bookie, "ok": ok, "status": Status(last.status).name, "message": last.message,
                    "reclaimedBytes": reclaimed})
    elif ok:
        print(f"{args.bookie}: GC and compaction done, reclaimed {_mib(reclaimed)}")
    else:
        print(f"{args.bookie}: GC not run: {Status(last.status).name} {last.message}")
    return 0 if ok else 1
