"""Retention: which whole ledgers a trim removes (pure), and the crash-safe trim itself."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import replace

from metadata import LedgerId, MetadataError, NoSuchLedgerError, log_trim, log_trim_marks
from metadata.context import now_ms
from metadata.log_record import LogLedger, LogRecord
from metadata.log_segments import SEGMENT_LEDGERS, LogHead
from metadata.logs import LogManager
from pyspark_ledger.log import trim_choice
from pyspark_ledger.log.position import Position
from pyspark_ledger.log.service import LedgerService

log = logging.getLogger(__name__)

TRIM_DELETES_MAX = 16_384  # ledgers one trim call deletes; the rest stay queued for the next


def choose_trim(rec: LogRecord, *, before: Position | None, max_age_ms: int | None, max_size_bytes: int | None,
                now: int | None = None) -> set[LedgerId]:
    """Pure: which whole ledgers a trim removes (trim_choice's rules without subscriptions, plus
    `before`: the ledgers that end before the position's ledger). Never the last ledger (the
    writer's), never an unsealed one; age is judged by the seal time."""
    now = now_ms() if now is None else now
    choice = trim_choice.choose(rec.ledgers, trim_choice.RetentionRules(max_age_ms, max_size_bytes), (), now)
    out = {lg.ledger_id for lg in choice.removed}
    if before is not None:
        trimmable = rec.ledgers[:trim_choice.trimmable_count(rec.ledgers)]
        out |= {lg.ledger_id for lg in trimmable if lg.seq < before.seq}
    return out


def trim_log(
    client: LedgerService,
    name: str,
    *,
    before: Position | None = None,
    max_age_s: float | None = None,
    max_size_bytes: int | None = None,
    crash_hook: Callable[[str], None] | None = None,
    delete_max: int = TRIM_DELETES_MAX,
) -> list[LedgerId]:
    """Trim whole ledgers off the front of a log, crash-safely (Apache Pulsar issue 13238):
    1. one head CAS raises the trim point: the tail's trimmed ledgers are listed in the head's
       pending deletions, the sealed segments' ones join the deletion queue (metadata.log_trim);
    2. delete them, a bounded batch at a time; 3. per batch, one head CAS clears them.
    A crash anywhere leaves them queued, and the next pass (any trim) finishes the job. At most
    `delete_max` ledgers are deleted per call: the rest stay queued for the next one.
    With no criteria given, the log's own retention settings apply."""
    crash = crash_hook or (lambda step: None)
    logs: LogManager = client.logs
    rec, _ = logs.read_tail(name)
    if before is None and max_age_s is None and max_size_bytes is None:
        max_age_s = None if rec.retention.max_age_ms is None else rec.retention.max_age_ms / 1000
        max_size_bytes = rec.retention.max_size_bytes
    age_ms = None if max_age_s is None else int(max_age_s * 1000)
    target = trim_target(logs, name, before=before, max_age_ms=age_ms, max_size_bytes=max_size_bytes)

    raise_trim_point(logs, name, target)
    crash("after_cas")
    deleted = delete_trimmed(client, name, delete_max, crash)
    crash("after_clear")
    if deleted:
        log.info("log trimmed log=%s deleted_ledgers=%d", name, len(deleted))
    return deleted


def raise_trim_point(logs: LogManager, name: str, target: int,
                     counted: Callable[[LogRecord, int], LogRecord] | None = None) -> int:
    """Step 1 of a trim: one head CAS raises the trim point to `target` (capped by trim_cap) and
    records the newest trimmed ledger's entry count (metadata.log_trim_marks.boundary);
    `counted(record, upto)` adds retention's counters to the same change. Returns the trim point."""
    def step1(r: LogRecord) -> LogRecord | None:
        upto = min(target, trim_cap(r))
        if upto <= r.trim_seq:
            return None
        last = _ledger_at(logs, name, r, upto - 1)
        out = r.trimmed_to(upto)
        if last is not None and last.entry_count is not None:
            out = log_trim_marks.with_boundary(out, last.seq, last.entry_count, last.ledger_id.qualified_name)
        return out if counted is None else counted(out, upto)

    rec, _ = logs.update_head(name, step1)
    return rec.trim_seq


def _ledger_at(logs: LogManager, name: str, r: LogRecord, seq: int) -> LogLedger | None:
    """The ledger `seq` of a head view: in its tail, else in the sealed segment holding it."""
    found = r.by_seq(seq)
    if found is not None:
        return found
    try:
        return next((lg for lg in logs.segment(name, seq // SEGMENT_LEDGERS) if lg.seq == seq), None)
    except MetadataError as exc:  # the boundary is a hint for readers; the trim goes on without it
        log.warning("could not read the trimmed boundary ledger log=%s seq=%d error=%s", name, seq, exc)
        return None


def delete_trimmed(client: LedgerService, name: str, delete_max: int = TRIM_DELETES_MAX,
                   crash: Callable[[str], None] = lambda step: None) -> list[LedgerId]:
    """Delete the log's queued trimmed ledgers, at most `delete_max` (bounded batches)."""
    deleted: list[LedgerId] = []
    while len(deleted) < delete_max:
        batch = log_trim.next_batch(client.logs, name, min(log_trim.DELETE_BATCH_MAX, delete_max - len(deleted)))
        if batch is None:
            break
        for lid in batch.ledgers:
            try:
                client.delete_ledger(lid)
            except NoSuchLedgerError:
                pass  # deleted by an earlier pass that crashed before clearing it
            deleted.append(lid)
            crash("after_delete")
        log_trim.finish_batch(client.logs, name, batch)
    return deleted


def trim_cap(r: LogRecord) -> int:
    """The highest trim point a head view allows: never the last ledger (the writer's), never an
    unsealed one or anything after it (segments hold only sealed ledgers)."""
    cap = max(r.next_seq - 1, r.trim_seq)
    unsealed = next((lg.seq for lg in r.ledgers if not lg.sealed), None)
    return cap if unsealed is None else min(cap, unsealed)


def trim_target(logs: LogManager, name: str, *, before: Position | None, max_age_ms: int | None,
                max_size_bytes: int | None, now: int | None = None) -> int:
    """The first seq a trim keeps. Reads only the segments the criteria need: ages from the
    oldest forward until a young ledger, sizes from the newest backward until the bound."""
    now = now_ms() if now is None else now
    head, _ = logs.read_head(name)
    target = head.trim_seq
    if before is not None:
        target = max(target, before.seq)
    if max_age_ms is not None:
        for lg in _ledgers_forward(logs, name, head):
            if not lg.sealed or now - trim_choice.age_reference_ms(lg) <= max_age_ms:
                break
            target = max(target, lg.seq + 1)
    if max_size_bytes is not None:
        total = 0
        for lg in _ledgers_backward(logs, name, head):
            total += lg.size_bytes or 0
            if total > max_size_bytes:
                target = max(target, lg.seq + 1)
                break
    return target


def _ledgers_forward(logs: LogManager, name: str, head: LogHead) -> Iterator[LogLedger]:
    for index in range(head.seg_first, head.seg_next):
        yield from (lg for lg in logs.segment(name, index) if lg.seq >= head.trim_seq)
    yield from head.record.ledgers


def _ledgers_backward(logs: LogManager, name: str, head: LogHead) -> Iterator[LogLedger]:
    yield from reversed(head.record.ledgers)
    for index in range(head.seg_next - 1, head.seg_first - 1, -1):
        yield from (lg for lg in reversed(logs.segment(name, index)) if lg.seq >= head.trim_seq)


def set_retention(client: LedgerService, name: str, *, max_age_s: float | None, max_size_bytes: int | None) -> None:
    age_ms = None if max_age_s is None else int(max_age_s * 1000)
    # replace, not a new Retention: keys a newer release keeps there survive this change
    client.logs.update_head(name, lambda r: r.with_retention(replace(r.retention, max_age_ms=age_ms,
                                                                     max_size_bytes=max_size_bytes)))
