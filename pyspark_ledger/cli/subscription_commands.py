"""`ledger subscriptions list|create|move|delete`: a log's durable named subscriptions
(docs/subscriptions.md).

`list [LOG]` shows each subscription's position (the last message it consumed), its lag (entries,
bytes, and the age of its oldest unread message), its last commit time, and any data it lost to
retention. `create` and `move` place a subscription as Kafka's consumer-group offset reset tool
does: --to-earliest, --to-latest, --to-position (the subscription next reads that message),
--to-datetime or --to-timestamp-ms (next reads the first message at or after that time). A move
goes in either direction and clears the loss marker: moving acknowledges the loss."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from metadata.subscriptions import Subscription, SubscriptionPosition, SubscriptionStore
from pyspark_ledger.cli.output import print_json, print_table
from pyspark_ledger.cli.passwords import add_password_args
from pyspark_ledger.errors import PySparkLedgerError

if TYPE_CHECKING:
    from pyspark_ledger.client import LedgerClient
    from pyspark_ledger.log import LogReader
    from pyspark_ledger.log.subscription import SubscriptionLag


class SubscriptionArgsError(PySparkLedgerError, ValueError):
    """A bad --to-... value (the shell prints it, naming the flag, and exits 1)."""


def add_parsers(sub: Any, json_adder: Any) -> None:
    p = sub.add_parser("subscriptions", help="list, create, move or delete a log's durable subscriptions")
    ssub = p.add_subparsers(dest="subscriptions_command", metavar="ACTION")
    ssub.required = True
    ssub.add_parser = json_adder(ssub.add_parser)
    q = ssub.add_parser("list", help="list subscriptions with their position, lag (entries, bytes, time) and losses")
    q.add_argument("log", nargs="?", help="the log's name (default: every log)")
    add_password_args(q)  # lag reads a few entries of the log
    q = ssub.add_parser("create", help="create a subscription (default: at the log's latest message)")
    _names(q)
    _targets(q, required=False)
    q = ssub.add_parser("move", help="move a subscription (either direction), like Kafka's offset reset tool")
    _names(q)
    _targets(q, required=True)
    q = ssub.add_parser("delete", help="delete a subscription (retention then no longer keeps data for it)")
    _names(q)


def _names(q: argparse.ArgumentParser) -> None:
    q.add_argument("log", help="the log's name")
    q.add_argument("name", help="the subscription's name")


def _targets(q: argparse.ArgumentParser, *, required: bool) -> None:
    g = q.add_mutually_exclusive_group(required=required)
    g.add_argument("--to-earliest", action="store_true", help="next read the first message the log still holds")
    g.add_argument("--to-latest", action="store_true", help="next read only messages appended from now on")
    g.add_argument("--to-position", metavar="POSITION",
                   help='next read this message, a position JSON {"seq": n, "ledger": hex, "entry": n, "index": n}')
    g.add_argument("--to-datetime", metavar="TIME",
                   help="next read the first message at or after this ISO time (e.g. 2026-11-27T10:00:00Z; UTC if no zone)")
    g.add_argument("--to-timestamp-ms", type=int, metavar="MS",
                   help="next read the first message at or after this time (ms since the epoch)")
    add_password_args(q)  # finding a time or the latest message reads entries


def subscriptions(client: LedgerClient, args: argparse.Namespace) -> int:
    action = args.subscriptions_command
    subs = SubscriptionStore(client.store)
    if action == "list":
        return _list(client, args)
    if action == "delete":
        subs.delete(args.log, args.name)
        print(f"deleted subscription {args.name} of log {args.log}")
        return 0
    with client.open_log_reader(args.log, password=args.password) as reader:
        target = _target(reader, args)
        sub = subs.create(args.log, args.name, target) if action == "create" else subs.move(args.log, args.name, target)
    if getattr(args, "json", False):
        print_json(_json(sub, None))
    else:
        print(f"{action}d subscription {sub.name} of log {sub.log} at {_position(sub.position)}")
    return 0


def _target(reader: LogReader, args: argparse.Namespace) -> SubscriptionPosition:
    from pyspark_ledger.log import Position
    from pyspark_ledger.log.subscription import at_time, earliest, just_before, latest

    if args.to_earliest:
        return earliest(reader)
    if args.to_position:
        try:
            return just_before(Position.from_json(args.to_position))
        except ValueError as exc:
            raise SubscriptionArgsError(f"--to-position: {exc}") from None
    if args.to_datetime:
        return at_time(reader, _datetime_ms(args.to_datetime))
    if args.to_timestamp_ms is not None:
        return at_time(reader, args.to_timestamp_ms)
    return latest(reader)  # --to-latest, and create's default (Kafka's auto.offset.reset)


def _datetime_ms(text: str) -> int:
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise SubscriptionArgsError(f"--to-datetime: {text!r} is not an ISO time such as 2026-11-27T10:00:00Z") from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return int(at.timestamp() * 1000)


def _list(client: LedgerClient, args: argparse.Namespace) -> int:
    from pyspark_ledger.autorecovery.subscription_lag import measure

    found = measure(client, args.log, args.password)
    if getattr(args, "json", False):
        print_json([_json(sub, behind) for sub, behind in found])
        return 0
    print_table(["log", "subscription", "position", "lag entries", "lag bytes", "lag time", "last commit", "lost"],
                [(s.log, s.name, _position(s.position), b.entries, b.size_bytes, _duration(b.time_ms),
                  _when(s.commit_ms), _lost(s)) for s, b in found])
    return 0


def _json(sub: Subscription, behind: SubscriptionLag | None) -> dict[str, Any]:
    p = sub.position
    d: dict[str, Any] = {
        "log": sub.log, "subscription": sub.name,
        "position": None if p is None else {"seq": p.seq, "entry": p.entry_id, "index": p.index},
        "commitMs": sub.commit_ms, "ctimeMs": sub.ctime_ms,
        "lostBeforeSeq": sub.lost_before_seq, "lostEntries": sub.lost_entries, "lostMs": sub.lost_ms,
    }
    if behind is not None:
        d.update(lagEntries=behind.entries, lagBytes=behind.size_bytes, lagMs=behind.time_ms)
    return d


def _position(p: SubscriptionPosition | None) -> str:
    """seq:entry:index of the last message consumed ('start': none yet; ':*' a whole entry)."""
    if p is None:
        return "start"
    if p.entry_id < 0:
        return f"before {p.seq}:0"
    from metadata.subscriptions import INDEX_WHOLE_ENTRY

    return f"{p.seq}:{p.entry_id}:" + ("*" if p.index == INDEX_WHOLE_ENTRY else str(p.index))


def _duration(ms: int) -> str:
    return f"{ms / 1000:.1f}s" if ms < 120_000 else f"{ms / 60_000:.1f}m" if ms < 7_200_000 else f"{ms / 3_600_000:.1f}h"


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _lost(sub: Subscription) -> str:
    return "" if not sub.lost_data else f"{sub.lost_entries} entries before seq {sub.lost_before_seq}"
