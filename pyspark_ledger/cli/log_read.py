"""`ledger logs read NAME [--from POSITION] [--limit N]`: a log's messages, each with its own
position (seq, ledger, entry, index), batched entries unpacked message by message.

Text: one line per message, `seq:ledger:entry:index<TAB>payload` (the payload as UTF-8, bytes
that are not shown as \\x escapes). --json: a list of objects with the position, the payload in
base64 (lossless), the key in base64 (or null) and the append time (ms, batched messages)."""

from __future__ import annotations

import argparse
import base64
import itertools
from typing import TYPE_CHECKING, Any

from pyspark_ledger.cli.output import print_json
from pyspark_ledger.cli.passwords import add_password_args
from pyspark_ledger.errors import PySparkLedgerError

if TYPE_CHECKING:
    from pyspark_ledger.client import LedgerClient
    from pyspark_ledger.log import LogEntry

READ_LIMIT_DEFAULT = 1000
READ_LIMIT_MAX = 10_000_000


class ReadArgsError(PySparkLedgerError, ValueError):
    """A bad --from or --limit (the shell prints it, naming the flag, and exits 1)."""


def add_read_parser(lsub: Any) -> None:
    q = lsub.add_parser("read", help="print a log's messages with their positions (batched entries message by message)")
    q.add_argument("name", help="the log's name")
    q.add_argument("--from", dest="start", metavar="POSITION",
                   help='first message to print, a position JSON {"seq": n, "ledger": hex, "entry": n, "index": n} '
                        "(index optional); default: the start of the log")
    q.add_argument("--limit", type=int, default=READ_LIMIT_DEFAULT, metavar="N",
                   help=f"print at most N messages (default {READ_LIMIT_DEFAULT}, at most {READ_LIMIT_MAX})")
    add_password_args(q)


def _json(e: LogEntry) -> dict[str, Any]:
    p = e.position
    return {"seq": p.seq, "ledger": p.ledger_id.qualified_name, "entry": p.entry_id, "index": p.index,
            "payloadBase64": base64.b64encode(e.payload).decode(),
            "keyBase64": None if e.key is None else base64.b64encode(e.key).decode(),
            "appendTimeMs": e.append_time_ms}


def read(client: LedgerClient, args: argparse.Namespace) -> int:
    if not 0 <= args.limit <= READ_LIMIT_MAX:
        raise ReadArgsError(f"--limit must be 0..{READ_LIMIT_MAX}, not {args.limit}")
    from pyspark_ledger.log import Position  # imported when used: the shell starts without the log room

    start = None
    if args.start:
        try:
            start = Position.from_json(args.start)
        except ValueError as exc:
            raise ReadArgsError(f"--from: {exc}") from None
    with client.open_log_reader(args.name, password=args.password) as reader:
        messages = itertools.islice(reader.read(start), args.limit)
        if getattr(args, "json", False):
            print_json([_json(e) for e in messages])
            return 0
        for e in messages:
            p = e.position
            print(f"{p.seq}:{p.ledger_id.qualified_name}:{p.entry_id}:{p.index}\t"
                  f"{e.payload.decode('utf-8', 'backslashreplace')}")
    return 0
