"""`ledger logs show NAME`: a log's summary from its head alone (one read however long the log);
its ledgers only on request (--ledgers N: the newest N, read back through as few segments as
that takes), bounded by LEDGERS_SHOWN_MAX."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from metadata import log_segments as segs
from metadata import log_trim_marks
from metadata.log_record import LogLedger
from metadata.log_record import to_json_dict as log_json
from metadata.log_segments import LogHead
from pyspark_ledger.cli.output import print_json, print_table
from pyspark_ledger.cli.retention_commands import settings_rows

if TYPE_CHECKING:
    from pyspark_ledger.client import LedgerClient

LEDGERS_SHOWN_MAX = 100_000


def ledger_count(head: LogHead) -> int:
    """Ledgers in the log: the tail's plus the sealed segments' (every seq from the trim point to
    the boundary is a ledger: segments are filled from the tail and only trimmed at the front)."""
    return len(head.record.ledgers) + max(head.boundary - max(head.trim_seq, segs.SEGMENT_LEDGERS * head.seg_first), 0)


def newest_ledgers(client: LedgerClient, head: LogHead, count: int) -> list[LogLedger]:
    """The newest `count` ledgers, oldest first: the tail, then segments backwards as needed."""
    out: list[LogLedger] = list(reversed(head.record.ledgers))[:count]
    for index in range(head.seg_next - 1, head.seg_first - 1, -1):
        if len(out) >= count:
            break
        seg = [lg for lg in client.logs.segment(head.record.name, index) if lg.seq >= head.trim_seq]
        out.extend(list(reversed(seg))[: count - len(out)])
    return list(reversed(out))


def show(client: LedgerClient, args: argparse.Namespace) -> int:
    head, _ = client.logs.read_head(args.name)
    rec = head.record
    wanted = min(max(int(getattr(args, "ledgers", 0) or 0), 0), LEDGERS_SHOWN_MAX)
    shown = newest_ledgers(client, head, wanted) if wanted else list(rec.ledgers)
    count = ledger_count(head)
    queued = max(head.trim_seq - head.deleted_seq, 0)
    if args.json:
        d: dict[str, Any] = log_json(rec)
        d["ledgers"] = [{"seq": lg.seq, "ledger": lg.ledger_id.qualified_name, "ctimeMs": lg.ctime_ms,
                         "entryCount": lg.entry_count, "sizeBytes": lg.size_bytes} for lg in shown]
        c = log_trim_marks.retention_counts(rec)
        d.update(ledgerCount=count, trimSeq=head.trim_seq, segments=head.seg_next - head.seg_first,
                 deletionQueueSeqs=queued, settings={k: v for k, v, _ in settings_rows(rec)},
                 retentionTrims={"ledgers": c.ledgers, "bytes": c.bytes, "passes": c.passes, "lastMs": c.last_ms})
        print_json(d)
        return 0
    print(f"log {rec.name}: writer epoch {rec.writer_epoch}, {count} ledger(s) (seq {head.trim_seq}..{rec.next_seq - 1}), "
          f"{head.seg_next - head.seg_first} sealed segment(s), format {rec.payload_format}")
    if wanted:
        print_table(["seq", "ledger", "created", "entries", "bytes"],
                    [(lg.seq, lg.ledger_id, _ms(lg.ctime_ms), "(open)" if lg.entry_count is None else lg.entry_count,
                      lg.size_bytes) for lg in shown])
    elif count:
        newest = rec.ledgers[-1] if rec.ledgers else None
        print(f"newest ledger: seq {newest.seq} (its position in the log), ledger id {newest.ledger_id}" if newest else "")
        print("(--ledgers N lists the newest N)")
    print("settings: " + ", ".join(f"{k}={v}" + ("" if where in ("retention", "set") else f" ({where})")
                                   for k, v, where in settings_rows(rec)))
    c = log_trim_marks.retention_counts(rec)
    if c.passes:
        print(f"retention trimmed {c.ledgers} ledger(s), {c.bytes} bytes, in {c.passes} pass(es); "
              f"last at {_ms(c.last_ms or 0)} UTC")
    if rec.pending_deletions or queued:
        print(f"pending deletions: {len(rec.pending_deletions)} listed, {queued} seq(s) queued in trimmed segments")
    return 0


def _ms(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
