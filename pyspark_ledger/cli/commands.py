"""The `ledger` shell's commands. Each takes (client, args) and returns an exit code."""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from metadata import LedgerId, NoSuchLedgerError, QuorumConfig, serde
from pyspark_ledger.cli.output import Progress, print_json, print_table
from pyspark_ledger.errors import LedgerError, NotEnoughBookiesError

if TYPE_CHECKING:
    from pyspark_ledger.autorecovery.copy_pace import CopyPace
    from pyspark_ledger.client import LedgerClient
    from pyspark_ledger.ledger.keys import CredentialSource


def ledger_id(args: argparse.Namespace) -> LedgerId:
    """The ledger named by LEDGER plus --ledger-scope-id / --ledger-qualified-name (BP-35)."""
    raw = str(args.ledger).strip()
    if getattr(args, "ledger_qualified_name", False):
        return LedgerId.from_qualified_name(raw)
    scope = getattr(args, "ledger_scope_id", None)
    if scope is not None:
        if not raw.isdigit():
            raise ValueError(f"with --ledger-scope-id the ledger id must be a decimal number, got {raw!r}")
        return LedgerId(scope, int(raw))
    return LedgerId.parse(raw)


def _ms(ms: int | None) -> str:
    if ms is None:
        return ""
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, ValueError, OSError):
        return str(ms)


# ---- ledgers -----------------------------------------------------------------------------------


def listledgers(client: LedgerClient, args: argparse.Namespace) -> int:
    rows: list[tuple[object, ...]] = []
    out: list[dict[str, object]] = []
    progress = Progress("scanning ledgers", quiet=args.json)
    need_meta = args.meta or args.bookie or args.state or args.json
    for lid in client.list_ledgers(args.scope):
        progress.update()
        if not need_meta:
            rows.append((lid, lid.qualified_name))
            continue
        got = client.ledgers.get(lid)
        if got is None:
            continue
        meta = got[0]
        if args.bookie and args.bookie not in meta.bookies():
            continue
        if args.state and meta.state.value != args.state:
            continue
        if args.json:
            out.append({"ledger": str(lid), "qualifiedName": lid.qualified_name, "state": meta.state.value,
                        "lastEntryId": meta.last_entry_id, "ensembleSize": meta.ensemble_size})
        elif args.meta:
            quorum = f"{meta.ensemble_size}/{meta.write_quorum_size}/{meta.ack_quorum_size}"
            rows.append((lid, lid.qualified_name, meta.state.value, quorum, meta.last_entry_id))
        else:
            rows.append((lid, lid.qualified_name))
    progress.done()
    if args.json:
        print_json(out)
    elif args.meta:
        print_table(["ledger", "qualified name", "state", "E/W/A", "last entry"], rows)
    else:
        print_table(["ledger", "qualified name"], rows)
    return 0


def ledgermetadata(client: LedgerClient, args: argparse.Namespace) -> int:
    meta = client.ledger_metadata(ledger_id(args))
    d = serde.to_json_dict(meta)
    if args.json:
        print_json(d)
        return 0
    print(f"ledger            {meta.ledger_id} ({meta.ledger_id.qualified_name})")
    print(f"state             {meta.state.value}")
    print(f"quorum            E={meta.ensemble_size} W={meta.write_quorum_size} A={meta.ack_quorum_size}")
    print(f"last entry        {meta.last_entry_id if meta.is_closed else '(open)'}")
    print(f"length            {meta.length_bytes if meta.is_closed else '(open)'}")
    print(f"digest            {meta.digest_type.value}{' (password set)' if d['hasPassword'] else ''}")
    print(f"created           {_ms(meta.ctime_ms)}")
    print(f"sealed            {_ms(meta.seal_time_ms)}")
    for seg in meta.segments:
        print(f"ensemble from {seg.first_entry_id:<6} {', '.join(seg.bookies)}")
    if meta.create_context:
        print(f"create context    {json.dumps(d['createContext'])}")
    if meta.close_context:
        print(f"close context     {json.dumps(d['closeContext'])}")
    for k, v in sorted(meta.custom.items()):
        print(f"custom {k:<10} {v!r}")
    return 0


def readledger(client: LedgerClient, args: argparse.Namespace) -> int:
    lid = ledger_id(args)
    handle = client.open_ledger(lid, recovery=args.force_recovery, password=args.password)
    last = handle.last_add_confirmed() if args.last is None else args.last
    rows = []
    for e in handle.read_entries(args.first, last) if last >= args.first else []:
        payload = e.payload.hex() if args.format == "hex" else e.payload.decode("utf-8", errors="replace")
        if args.json:
            rows.append({"entryId": e.entry_id, "payload": payload})
        else:
            print(f"{e.entry_id}\t{payload}")
    if args.json:
        print_json(rows)
    return 0


def deleteledger(client: LedgerClient, args: argparse.Namespace) -> int:
    lid = ledger_id(args)
    client.ledger_metadata(lid)  # a clear "no such ledger" before asking anything
    if not args.force and sys.stdin.isatty():
        if input(f"delete ledger {lid}? [y/N] ").strip().lower() != "y":
            print("not deleted")
            return 1
    client.delete_ledger(lid, password=args.password or None)  # bookies delete for its key, or an operator
    print(f"deleted ledger {lid}")
    return 0


def recover(client: LedgerClient, args: argparse.Namespace) -> int:
    from pyspark_ledger.autorecovery.copy_pace import CopyPace, check_rate_mb_s
    from pyspark_ledger.ledger.keys import CredentialSource

    if bool(args.ledger) == bool(args.bookie):
        raise ValueError("give exactly one of LEDGER or --bookie")
    # bytes (cli/passwords.py); empty: work as the operator when bookies accept this client as one
    credentials = CredentialSource(client.context, args.password)
    lost = {args.bookie} if args.bookie else set()
    pace = CopyPace(check_rate_mb_s(args.rate_mb_s, "--rate-mb-s"))
    parallel = check_parallel(args.parallel)
    if args.ledger:
        targets = [ledger_id(args)]
    else:
        targets = []
        for lid in client.list_ledgers():
            got = client.ledgers.get(lid)
            if got is not None and args.bookie in got[0].bookies():
                targets.append(lid)
    progress = Progress("recovering", len(targets), quiet=args.json)
    results: list[dict[str, Any]] = []  # JSON objects: ledger, actions, lastEntryId
    failures: list[dict[str, str]] = []

    def one(lid: LedgerId) -> dict[str, Any]:
        try:
            return _recover_one(client, lid, args, credentials, lost, pace)
        except (LedgerError, Exception) as exc:  # noqa: BLE001 - keep going; every failure is reported
            return {"ledger": str(lid), "error": str(exc)}

    # Several ledgers at once (--parallel), their copies sharing the one pace: map keeps the order.
    with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="recover") as pool:
        for outcome in pool.map(one, targets):
            progress.update()
            (failures if "error" in outcome else results).append(outcome)
    progress.done()
    if args.json:
        print_json({"dryRun": args.dry_run, "recovered": results, "failed": failures})
    else:
        verb = "would" if args.dry_run else "did"
        for r in results:
            print(f"ledger {r['ledger']}: {verb} {'; '.join(r['actions']) or 'nothing (already closed and replicated)'}")
        for f in failures:
            print(f"ledger {f['ledger']}: FAILED: {f['error']}", file=sys.stderr)
        print(f"{len(results)} ledger(s) {'checked' if args.dry_run else 'recovered'}, {len(failures)} failed")
    return 1 if failures else 0


RECOVER_PARALLEL_MAX = 64


def check_parallel(n: int) -> int:
    if not 1 <= n <= RECOVER_PARALLEL_MAX:
        raise ValueError(f"--parallel must be in 1..{RECOVER_PARALLEL_MAX}, got {n}")
    return n


def _recover_one(client: LedgerClient, lid: LedgerId, args: argparse.Namespace, credentials: CredentialSource,
                 lost: set[str], pace: CopyPace) -> dict[str, Any]:
    """`ledger recover` for one ledger: fence and close it when open, then re-replicate its
    fragments off --bookie. Returns its JSON object (ledger, actions, lastEntryId)."""
    from pyspark_ledger.autorecovery.rereplication import fragments_on, rereplicate
    from pyspark_ledger.ledger.recovery import recover_ledger

    meta = client.ledger_metadata(lid)
    actions = []
    if not meta.is_closed:
        actions.append("fence and close")
        if not args.dry_run:
            meta, _ = recover_ledger(client.context, lid, credentials.for_ledger(meta, avoid=lost))
    if args.bookie and not args.no_rereplicate and fragments_on(meta, args.bookie):
        if meta.is_closed:
            moved = rereplicate(client.context, lid, args.bookie,
                                credentials.for_ledger(meta, avoid=lost), dry_run=args.dry_run, pace=pace)
            actions += [f"fragment {i}: {args.bookie} -> {new}" for i, new in moved]
        else:
            actions.append(f"re-replicate fragments from {args.bookie}")
    return {"ledger": str(lid), "actions": actions, "lastEntryId": meta.last_entry_id if meta.is_closed else None}


# ---- bookies -----------------------------------------------------------------------------------


def listbookies(client: LedgerClient, args: argparse.Namespace) -> int:
    infos = client.bookies(writable=not args.ro, read_only=not args.rw)
    if args.json:
        print_json([{"bookieId": b.bookie_id, "address": b.address, "addAddress": b.add_address,
                     "readOnly": b.read_only, "version": b.version, "instanceId": b.instance_id} for b in infos])
    else:
        print_table(["bookie", "address", "add address", "state", "version"],
                    [(b.bookie_id, b.address, b.add_address or "(gRPC)", "read-only" if b.read_only else "writable",
                      b.version) for b in infos])
    return 0


def _write_read_delete(client: LedgerClient, args: argparse.Namespace, n: int, e: int, w: int, a: int,
                       ensemble: list[str] | None = None) -> dict[str, Any]:
    start = time.monotonic()
    handle = client.create_ledger(e, w, a, ensemble=ensemble, digest_type=args.digest, password=args.password)
    lid = handle.ledger_id
    try:
        payloads = [f"simpletest entry {i}".encode() for i in range(n)]
        futures = [handle.add_entry_async(p) for p in payloads]
        for f in futures:
            f.result(timeout=60)
        handle.close()
        if ensemble is not None:
            moved = client.ledger_metadata(lid).bookies() - set(ensemble)
            if moved:
                raise LedgerError(f"writes to {', '.join(ensemble)} failed and moved to {', '.join(sorted(moved))}")
        reader = client.open_ledger(lid, password=args.password)
        read = [x.payload for x in reader.read_entries(0, n - 1)] if n else []
        if read != payloads:
            raise LedgerError(f"ledger {lid}: read back {len(read)} entries that differ from what was written")
    finally:
        try:
            client.delete_ledger(lid, password=args.password)  # the one it was created with
        except NoSuchLedgerError:
            pass
    return {"ledger": str(lid), "entries": n, "seconds": round(time.monotonic() - start, 3)}


def simpletest(client: LedgerClient, args: argparse.Namespace) -> int:
    QuorumConfig(args.ensemble_size, args.write_quorum_size, args.ack_quorum_size)
    r = _write_read_delete(client, args, args.num_entries, args.ensemble_size, args.write_quorum_size, args.ack_quorum_size)
    if args.json:
        print_json({"ok": True, **r})
    else:
        print(f"simpletest ok: wrote, read back and deleted {r['entries']} entries in ledger {r['ledger']} ({r['seconds']} s)")
    return 0


def bookiesanity(client: LedgerClient, args: argparse.Namespace) -> int:
    bookies = [args.bookie] if args.bookie else [b.bookie_id for b in client.bookies(read_only=False)]
    if not bookies:
        raise NotEnoughBookiesError("no writable bookies registered")
    results = []
    for b in bookies:
        try:
            r = _write_read_delete(client, args, args.num_entries, 1, 1, 1, ensemble=[b])
            results.append({"bookie": b, "ok": True, **r})
        except Exception as exc:  # noqa: BLE001 - report per bookie
            results.append({"bookie": b, "ok": False, "error": str(exc)})
    if args.json:
        print_json(results)
    else:
        for r in results:
            print(f"{r['bookie']}: {'ok' if r['ok'] else 'FAILED: ' + r['error']}")
    return 0 if all(r["ok"] for r in results) else 1


# ---- logs --------------------------------------------------------------------------------------


def logs(client: LedgerClient, args: argparse.Namespace) -> int:
    from pyspark_ledger.log import Position

    if args.logs_command == "list":
        names = client.list_logs()
        if args.json:
            print_json(names)
        else:
            for n in names:
                print(n)
        return 0
    if args.logs_command == "show":
        from pyspark_ledger.cli.log_show import show

        return show(client, args)
    if args.logs_command == "delete":
        from pyspark_ledger.cli.log_delete import delete

        return delete(client, args)
    if args.logs_command == "read":
        from pyspark_ledger.cli.log_read import read

        return read(client, args)
    if args.logs_command == "set":
        from pyspark_ledger.cli.retention_commands import logs_set

        return logs_set(client, args)
    before = Position.from_json(args.before) if args.before else None
    trimmed = client.trim_log(args.name, before=before, max_age_s=args.max_age_s, max_size_bytes=args.max_size_bytes)
    if args.json:
        print_json([str(x) for x in trimmed])
    else:
        print(f"trimmed {len(trimmed)} ledger(s) from log {args.name}" + (f": {', '.join(map(str, trimmed))}" if trimmed else ""))
    return 0


# ---- quorums -----------------------------------------------------------------------------------


def quorums(_client: None, args: argparse.Namespace) -> int:
    q = QuorumConfig(args.ensemble_size, args.write_quorum_size, args.ack_quorum_size)
    rows = q.explain()
    if args.json:
        print_json({k: v for k, v in rows})
    else:
        print_table(["property", "value"], rows)
    return 0


# ---- BP-44 -------------------------------------------------------------------------------------


def listorphaned(client: LedgerClient, args: argparse.Namespace) -> int:
    from pyspark_ledger.autorecovery.auditor import Auditor

    orphans = Auditor(client.context).list_orphans()
    if args.json:
        print_json([{"ledger": str(o.ledger_id), "reason": o.reason, "detail": o.detail} for o in orphans])
        return 0
    for o in orphans:
        print(f"{o.ledger_id} {o.reason} {o.detail}" if args.printorphanreason else str(o.ledger_id))
    return 0


def showowner(client: LedgerClient, args: argparse.Namespace) -> int:
    meta = client.ledger_metadata(ledger_id(args))
    ctx = serde.create_context_json(meta.create_context) or {}
    print_json({"createdBy": ctx.get("createdBy"), "onBehalfOf": ctx.get("onBehalfOf"), "dataSet": ctx.get("dataSet")})
    return 0


def _seconds(ms: int | None) -> int | None:
    return None if ms is None else ms // 1000


def predictlifespan(client: LedgerClient, args: argparse.Namespace) -> int:
    meta = client.ledger_metadata(ledger_id(args))
    create, close = meta.create_context, meta.close_context
    expected_seal = None
    if create is not None and create.expected_max_open_duration_ms is not None:
        expected_seal = meta.ctime_ms + create.expected_max_open_duration_ms
    print_json({
        "createTime": _seconds(meta.ctime_ms),
        "expectedSealTime": _seconds(expected_seal),
        "actualSealTime": _seconds(meta.seal_time_ms),
        "expectedReadUntilTime": _seconds(close.expect_reads_until_ms if close else None),
        "expectedDeleteTime": _seconds(close.expect_delete_after_ms if close else None),
    })
    return 0


def auditor(client: LedgerClient, args: argparse.Namespace) -> int:
    from pyspark_ledger.autorecovery.auditor import Auditor

    aud = Auditor(client.context, grace_period_s=args.grace_period_s, scan_rate_per_s=args.rate)
    passes = 1 if args.interval_s is None else args.passes
    n = 0
    while passes is None or n < passes:
        n += 1
        progress = Progress(f"audit pass {n}: ledgers scanned", quiet=args.json)
        found = aud.audit_once(progress.update)
        progress.done()
        if args.json:
            orphans = [{"ledger": str(o.ledger_id), "reason": o.reason, "detail": o.detail} for o in found]
            print_json({"pass": n, "orphans": orphans})
        else:
            print(f"audit pass {n}: {len(found)} orphaned ledger(s)")
        sys.stdout.flush()
        if passes is None or n < passes:
            time.sleep(args.interval_s)
    return 0
