"""Taking a log over: the one way any writer (LogWriter, Spark batch job, streaming query) becomes
the log's single writer.

    1. bump the log's writer epoch by compare-and-set: every later change by an older writer,
       whoever it is, fails its epoch check (StaleEpochError);
    2. fence and close (a recovery open) EVERY unsealed ledger of the log, not only the last two:
       a previous writer may still write to any of them (a LogWriter that stopped after a failed
       seal left one behind its newest ledger; a Spark writer's ledgers are sealed before they are
       appended, but an older format or a crash can leave any of them open);
    3. record their seals in the log by one compare-and-set, checking the epoch is still ours.

Every ledger a previous writer could still write to is in the log's head: immutable segments
hold only sealed ledgers, the head holds the unsealed tail. Ledgers a previous writer created but
never appended (a Spark task's, a LogWriter's lost add) are not in the log at all; staging abort
and the orphan auditor delete them. After a takeover the invariant holds: no ledger of the log is
OPEN except the one the live writer is appending to (its last).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from metadata import LedgerId, LedgerMetadata, NoSuchLedgerError
from metadata.log_record import LogLedger, LogRecord
from metadata.logs import LogExistsError
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.log.errors import StaleEpochError

if TYPE_CHECKING:
    from pyspark_ledger.log.service import LedgerService

log = logging.getLogger(__name__)

# The head's tail is bounded (one segment's worth plus the open ledgers), so this is never reached
# by a log written through takeovers; it bounds one takeover's work on a damaged or hand-made log.
# Beyond it the takeover fails, naming the log, after recovering this many (the next finishes).
TAKEOVER_LEDGERS_MAX = 1_024


@dataclass(frozen=True)
class Takeover:
    """A writer's hold on a log: `epoch` is its writer epoch; every ledger appended under it has
    seq >= `from_seq` (the log's next_seq when the epoch was taken). `record` is the log record
    (or the head's view of it) after the seals were recorded."""

    name: str
    epoch: int
    from_seq: int
    record: LogRecord


def update_log_head(client: LedgerService, name: str,
                    change: Callable[[LogRecord], LogRecord | None]) -> tuple[LogRecord, int]:
    """One compare-and-set loop on the log's head (LogManager.update_head: the change sees only
    the head's tail, which holds every unsealed ledger; nothing here needs more)."""
    return client.logs.update_head(name, change)


def check_epoch(rec: LogRecord, epoch: int, writer: str = "this writer") -> None:
    """Inside a change: refuse it unless `epoch` is still the log's writer epoch."""
    if rec.writer_epoch != epoch:
        raise StaleEpochError(rec.name, rec.writer_epoch, epoch, writer)


def unsealed_ledgers(ledgers: tuple[LogLedger, ...]) -> list[LogLedger]:
    """The ledgers a takeover must fence and close: every unsealed one (bounded)."""
    return [lg for lg in ledgers if not lg.sealed][:TAKEOVER_LEDGERS_MAX]


def take_over(client: LedgerService, name: str, password: bytes = b"", *, create: bool = False,
              writer: str = "this writer") -> Takeover:
    """Become the log's writer: bump the epoch, fence and close every unsealed ledger, record
    their seals. Raises StaleEpochError if yet another writer took over meanwhile."""
    if create:
        try:
            client.logs.create(LogRecord(name))
        except LogExistsError:
            pass
    taken: list[int] = []

    def bump(r: LogRecord) -> LogRecord:
        taken[:] = [r.next_seq]
        return r.with_epoch(r.writer_epoch + 1)

    rec, _ = update_log_head(client, name, bump)
    epoch, from_seq = rec.writer_epoch, taken[0]
    log.info("log taken over log=%s epoch=%d by=%s", name, epoch, writer)
    unsealed = [lg for lg in rec.ledgers if not lg.sealed]
    seals = fence_and_close([lg.ledger_id for lg in unsealed_ledgers(rec.ledgers)], client, password)

    def record_seals(r: LogRecord) -> LogRecord | None:
        check_epoch(r, epoch, writer)
        out = r
        for lid, meta in seals.items():
            i = out.index_of(lid)
            # A closed ledger's metadata has both its end and its length (LedgerMetadata checks it).
            if i is not None and not out.ledgers[i].sealed and meta.last_entry_id is not None \
                    and meta.length_bytes is not None:
                out = out.with_sealed(lid, meta.last_entry_id + 1, meta.length_bytes)
        return None if out is r else out

    rec, _ = update_log_head(client, name, record_seals)
    check_epoch(rec, epoch, writer)
    if len(unsealed) > TAKEOVER_LEDGERS_MAX:
        raise LedgerError(f"log {name!r} has {len(unsealed)} unsealed ledgers; a takeover closes at most "
                          f"{TAKEOVER_LEDGERS_MAX}: take it over again to close the rest")
    return Takeover(name, epoch, from_seq, rec)


def fence_and_close(ledger_ids: list[LedgerId], client: LedgerService,
                    password: bytes) -> dict[LedgerId, LedgerMetadata]:
    """Recovery-open each ledger (fence it on its bookies, then close it at its last recoverable
    entry). A ledger that no longer exists (trimmed, deleted) is skipped."""
    out: dict[LedgerId, LedgerMetadata] = {}
    for lid in ledger_ids:
        try:
            reader = client.open_ledger(lid, recovery=True, password=password)
        except NoSuchLedgerError:
            continue
        try:
            out[lid] = reader.metadata
        finally:
            reader.close()
    return out


def open_ledgers_of(client: LedgerService, name: str, password: bytes = b"") -> list[LedgerId]:
    """The ledgers of a log's head whose ledger metadata is not closed, in log order: after a
    takeover only the live writer's last ledger may be here (the invariant tests check)."""
    head, _ = client.logs.read_head(name)
    out: list[LedgerId] = []
    for lg in head.record.ledgers[:TAKEOVER_LEDGERS_MAX]:
        try:
            handle = client.open_ledger(lg.ledger_id, password=password)  # no recovery: only looks
        except NoSuchLedgerError:
            continue
        try:
            if not handle.metadata.is_closed:
                out.append(lg.ledger_id)
        finally:
            handle.close()
    return out
