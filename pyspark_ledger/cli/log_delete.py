"""`ledger logs delete NAME`: asks first, fences the log's writer, deletes the log and its ledgers
(pyspark_ledger/log/deletion.py says why it fences rather than refuses)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from metadata.logs import NoSuchLogError
from pyspark_ledger.cli.log_show import ledger_count
from pyspark_ledger.cli.output import print_json
from pyspark_ledger.log.deletion import delete_log

if TYPE_CHECKING:
    from pyspark_ledger.client import LedgerClient

NOT_A_TERMINAL = ("ledger: error: logs delete {name}: standard input is not a terminal, so nobody can confirm; "
                  "pass --yes to delete without asking")


def confirmed(name: str, ledgers: int) -> bool:
    """Ask on the terminal; only y or yes (any case) deletes."""
    try:
        answer = input(f"delete log {name} with {ledgers} ledgers? [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def delete(client: LedgerClient, args: argparse.Namespace) -> int:
    try:
        head, _ = client.logs.read_head(args.name)
    except NoSuchLogError:
        print(f"ledger: error: no such log {args.name!r}", file=sys.stderr)
        return 1
    ledgers = ledger_count(head)
    if not args.yes:
        if not sys.stdin.isatty():
            print(NOT_A_TERMINAL.format(name=args.name), file=sys.stderr)
            return 2
        if not confirmed(args.name, ledgers):
            print(f"log {args.name} not deleted")
            return 1
    deleted = delete_log(client, args.name, args.password)
    if args.json:
        print_json({"log": args.name, "deletedLedgers": deleted})
    else:
        print(f"deleted log {args.name} and {deleted} ledger(s)")
    return 0
