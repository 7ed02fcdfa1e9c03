"""Deleting a whole log, safe against a writer that is still appending to it.

There is no telling from metadata whether the writer holding the log's epoch is alive (a writer
keeps no lease). So the deletion fences first, exactly as a new writer's takeover does
(log/takeover.py): it bumps the writer epoch, so the old writer's next metadata change fails
with StaleEpochError, and fences and closes every unsealed ledger, so its next add fails on the
bookies. No append can then be acknowledged into a log that is being deleted. (A BookKeeper
client deleting a ledger that a writer still holds gives that writer no such signal; a
DistributedLog writer learns of a takeover the same way, by fencing.)

Then, like a trim of everything (log/retention.py), one head compare-and-set moves the trim point
past the last ledger, checking that the epoch is still the deleter's (a writer that took the log
over again in between keeps it: StaleEpochError); the deletion queue is drained (ledgers first, so
a crash leaves them queued, never unreferenced), and the log's own records go last.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from metadata.log_record import LogRecord
from pyspark_ledger.log.retention import delete_trimmed
from pyspark_ledger.log.takeover import check_epoch, take_over, update_log_head

if TYPE_CHECKING:
    from pyspark_ledger.log.service import LedgerService

log = logging.getLogger(__name__)

DELETER = "a log deletion"


def delete_log(client: LedgerService, name: str, password: bytes = b"") -> int:
    """Fence the log's writer, then delete the log and every ledger in it; returns how many
    ledgers were deleted. Raises NoSuchLogError for no such log, StaleEpochError if another
    writer took the log over during the deletion (the log is then left to that writer)."""
    taken = take_over(client, name, password, writer=DELETER)

    def trim_everything(r: LogRecord) -> LogRecord:
        check_epoch(r, taken.epoch, DELETER)
        return r.trimmed_to(r.next_seq)

    rec, _ = update_log_head(client, name, trim_everything)
    deleted = delete_trimmed(client, name, rec.next_seq + len(rec.pending_deletions) + 1)
    client.logs.delete(name)
    log.info("log deleted log=%s ledgers=%d", name, len(deleted))
    return len(deleted)
