"""Retention: which whole ledgers a trim removes (pure), and the crash-safe trim itself."""

from __future__ import annotations

import logging
from typing import Callable

from metadata import LedgerId, NoSuchLedgerError
from metadata.context import now_ms
from metadata.log_record import LogRecord, Retention
from metadata.logs import LogManager
from pyspark_ledger.log.position import Position
from pyspark_ledger.log.service import LedgerService

log = logging.getLogger(__name__)


def choose_trim(rec: LogRecord, *, before: Position | None, max_age_ms: int | None, max_size_bytes: int | None,
                now: int | None = None) -> set[LedgerId]:
    """Pure: which whole ledgers a trim removes. Never the last ledger (the writer's), never an
    unsealed one; `before` removes ledgers that end before the position's ledger."""
    now = now_ms() if now is None else now
    candidates = [lg for lg in rec.ledgers[:-1] if lg.sealed]
    out: set[LedgerId] = set()
    if before is not None:
        out |= {lg.ledger_id for lg in candidates if lg.seq < before.seq}
    if max_age_ms is not None:
        out |= {lg.ledger_id for lg in candidates if now - lg.ctime_ms > max_age_ms}
    if max_size_bytes is not None:
        total = rec.size_bytes
        for lg in candidates:
            if total <= max_size_bytes:
                break
            out.add(lg.ledger_id)
            total -= lg.size_bytes or 0
    # Only a prefix may go: a log never gets holes.
    prefix: set[LedgerId] = set()
    for lg in rec.ledgers:
        if lg.ledger_id not in out:
            break
        prefix.add(lg.ledger_id)
    return prefix


def trim_log(
    client: LedgerService,
    name: str,
    *,
    before: Position | None = None,
    max_age_s: float | None = None,
    max_size_bytes: int | None = None,
    crash_hook: Callable[[str], None] | None = None,
) -> list[LedgerId]:
    """Trim whole ledgers off the front of a log, crash-safely (Apache Pulsar issue 13238):
    1. CAS: remove them from the list AND record them as pending deletions (one change);
    2. delete each ledger; 3. CAS: clear them from pending deletions.
    A crash anywhere leaves them recorded, and the next pass (any trim) finishes the job.
    With no criteria given, the log's own retention settings apply."""
    crash = crash_hook or (lambda step: None)
    logs: LogManager = client.logs
    rec, _ = logs.read(name)
    if before is None and max_age_s is None and max_size_bytes is None:
        max_age_s = None if rec.retention.max_age_ms is None else rec.retention.max_age_ms / 1000
        max_size_bytes = rec.retention.max_size_bytes
    age_ms = None if max_age_s is None else int(max_age_s * 1000)
    chosen: set[LedgerId] = set()

    def step1(r: LogRecord) -> LogRecord | None:
        chosen.clear()
        chosen.update(choose_trim(r, before=before, max_age_ms=age_ms, max_size_bytes=max_size_bytes))
        return r.without_ledgers(chosen) if chosen else None

    rec, _ = logs.update(name, step1)
    crash("after_cas")
    pending = list(rec.pending_deletions)
    deleted: set[LedgerId] = set()
    for lid in pending:
        try:
            client.delete_ledger(lid)
        except NoSuchLedgerError:
            pass  # deleted by an earlier pass that crashed before step 3
        deleted.add(lid)
        crash("after_delete")
    if deleted:
        logs.update(name, lambda r: r.without_pending(deleted))
    crash("after_clear")
    if pending:
        log.info("log trimmed log=%s ledgers=%s", name, [str(x) for x in pending])
    return pending


def set_retention(client: LedgerService, name: str, *, max_age_s: float | None, max_size_bytes: int | None) -> None:
    ret = Retention(None if max_age_s is None else int(max_age_s * 1000), max_size_bytes)
    client.logs.update(name, lambda r: r.with_retention(ret))
