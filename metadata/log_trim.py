"""A log's deletion queue: the trimmed ledgers still to delete, kept out of the head (issue 19).

A head-only trim (LogRecord.trimmed_to through LogManager.update_head) raises the head's trim_seq
in one CAS. The ledgers it removed are found again here, never listed in the head unbounded:
- those that were in the head's tail are listed in the head's pending_deletions (bounded by the
  tail: about one segment's worth);
- those that were in sealed segments are the queue [deleted_seq, trim_seq): the trimmed segment
  records themselves list them, and are kept until their ledgers are deleted.

A deletion pass (pyspark_ledger.log.retention) takes a bounded batch (next_batch), deletes the
ledgers, then finish_batch deletes the segment records no one needs any more and raises
deleted_seq / clears pending_deletions in one head CAS. A crash anywhere repeats at most one
batch (deleting a deleted ledger is a no-op): a segment record is deleted only after its ledgers,
so a missing one in the queue's range means its ledgers are gone already. Nothing leaks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from metadata import log_segments as segs
from metadata.errors import BadVersionError, NoNodeError
from metadata.ids import LedgerId
from metadata.log_record import LogLedger
from metadata.logs import LogManager, NoSuchLogError
from metadata.paths import log_path, log_segment_path

DELETE_BATCH_MAX = 4_096  # ledgers one batch names (about 16 segments)


@dataclass(frozen=True)
class DeletionBatch:
    """Ledgers to delete now; then the queue moves up to `upto` and `pending` leave the head."""

    pending: tuple[LedgerId, ...]  # from the head's pending_deletions
    queued: tuple[LedgerId, ...]  # from trimmed segments, seqs in [deleted_seq, upto)
    upto: int
    segments_done: tuple[int, ...]  # segment records to delete once the ledgers are gone

    @property
    def ledgers(self) -> tuple[LedgerId, ...]:
        return self.pending + self.queued


def backlog(logs: LogManager, name: str) -> tuple[int, int]:
    """(ledgers listed in the head's pending deletions, seqs still in the segment queue)."""
    head, _ = logs.read_head(name)
    return len(head.record.pending_deletions), max(head.trim_seq - head.deleted_seq, 0)


def next_batch(logs: LogManager, name: str, limit: int = DELETE_BATCH_MAX) -> DeletionBatch | None:
    """The next bounded batch of the deletion queue (None: nothing to delete). Reads only the
    trimmed segments it names, one whole segment at a time."""
    head, _ = logs.read_head(name)
    pending = head.record.pending_deletions[:limit]
    queued: list[LedgerId] = []
    upto, done = head.deleted_seq, []
    index = head.deleted_seq // segs.SEGMENT_LEDGERS
    while upto < head.trim_seq and index < head.seg_next and len(pending) + len(queued) < limit:
        end = min((index + 1) * segs.SEGMENT_LEDGERS, head.trim_seq)
        queued.extend(lg.ledger_id for lg in _trimmed_segment(logs, name, index) if upto <= lg.seq < end)
        upto = end
        if index < min(head.seg_first, upto // segs.SEGMENT_LEDGERS):
            done.append(index)
        index += 1
    if upto < head.trim_seq and index >= head.seg_next:
        upto = head.trim_seq  # seqs past the segments were in the tail: listed in pending
    if not pending and not queued and upto == head.deleted_seq:
        return None
    return DeletionBatch(tuple(pending), tuple(queued), upto, tuple(done))


def _trimmed_segment(logs: LogManager, name: str, index: int) -> tuple[LogLedger, ...]:
    """A segment of the queue; a missing one was deleted after its ledgers (a crashed pass)."""
    got = logs.store.get(log_segment_path(name, index))
    if got is None:
        return ()
    return segs.decode_segment(got.value, f"log {name!r} segment {index}")


def finish_batch(logs: LogManager, name: str, batch: DeletionBatch) -> None:
    """After the batch's ledgers are deleted: drop the segment records it emptied, then move the
    queue and clear the pending ledgers in one head CAS (bounded retries)."""
    for index in batch.segments_done:
        logs.forget_segment(name, index)
        try:
            logs.store.delete(log_segment_path(name, index))
        except NoNodeError:
            pass
    cleared = set(batch.pending)
    delays = logs.retry.delays()
    while True:
        got = logs.store.get(log_path(name))
        if got is None:
            raise NoSuchLogError(f"no such log {name!r}")
        head = segs.decode_head(got.value, name)
        if head.legacy:  # a format 1 record has no queue; its first write converts it
            logs.update_head(name, lambda r: r.without_pending(cleared))
            return
        rec = head.record.without_pending(cleared)
        new = replace(head, record=rec, deleted_seq=min(max(head.deleted_seq, batch.upto), head.trim_seq))
        if new == head:
            return
        try:
            logs.store.compare_and_set(log_path(name), segs.encode_head(new), got.version)
            return
        except BadVersionError:
            delay = next(delays, None)
            if delay is None:
                raise
            time.sleep(delay)
