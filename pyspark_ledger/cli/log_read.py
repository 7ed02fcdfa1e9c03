"""`ledger logs read NAME [--from POSITION] [--limit N]`: a log's messages, each with its own
position (seq, ledger, entry, index), batched entries unpacked message by message.

Text: one line per message, `seq:ledger:entry:index<TAB>payload` (the payload as UTF-8, bytes
that are not shown as \\x escapes); --print-timestamp adds `timestamp=MS<TAB>` (and
`event=MS<TAB>` when the message has an event time), --print-headers adds `headers=k:v,...<TAB>`
before the payload (as Kafka's console consumer's print.timestamp / print.headers). --json: a
list of objects with the position, the payload in base64 (lossless), the key in base64 (or
null), the append time (ms, batched messages; null for an unbatched entry), the timestamp (the
append time, or the ledger's join time for an unbatched entry), the event time (or null) and
the headers ([{"key": str, "valueBase64": str}], in order, duplicates kept)."""

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
    q.add_argument("--print-timestamp", action="store_true", help="show each message's timestamp (and event time)")
    q.add_argument("--print-headers", action="store_true", help="show each message's headers")
    add_password_args(q)


def _json(e: LogEntry) -> dict[str, Any]:
    p = e.position
    return {"seq": p.seq, "ledger": p.ledger_id.qualified_name, "entry": p.entry_id, "index": p.index,
            "payloadBase64": base64.b64encode(e.payload).decode(),
            "keyBase64": None if e.key is None else base64.b64encode(e.key).decode(),
            "appendTimeMs": e.append_time_ms, "timestampMs": e.timestamp_ms, "eventTimeMs": e.event_time_ms,
            "headers": [{"key": k, "valueBase64": base64.b64encode(v).decode()} for k, v in e.headers]}


def _text(e: LogEntry, timestamps: bool, headers: bool) -> str:
    p = e.position
    cols = [f"{p.seq}:{p.ledger_id.qualified_name}:{p.entry_id}:{p.index}"]
    if timestamps:
        cols.append(f"timestamp={e.timestamp_ms}")
        if e.event_time_ms is not None:
            cols.append(f"event={e.event_time_ms}")
    if headers:
        cols.append("headers=" + ",".join(f"{k}:{v.decode('utf-8', 'backslashreplace')}" for k, v in e.headers))
    return "\t".join([*cols, e.payload.decode("utf-8", "backslashreplace")])


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
            print(_text(e, args.print_timestamp, args.print_headers))
    return 0
