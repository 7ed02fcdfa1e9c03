"""Segmented storage of a log record: a small head plus immutable segments (issue 19 item 1).

    /logs/<name>                      head (format 2): every LogRecord field except the sealed
                                      ledgers, plus the open tail and the range of segments
    /logs/<name>/segments/<index>     immutable: the ledgers with seq in [index*SEG, (index+1)*SEG)

Segment `k` covers a fixed range of sequence numbers, so the head names its segments with two
integers (first, next) however long the log is, and a commit writes a bounded number of bytes:
the head's tail holds at most one segment's worth of ledgers plus the open ones. The head CAS is
the only commit point. Sealing writes the segment first, then CASes the head; a segment the head
never references (a lost race, a crash in between) is ignored by readers. Two writers that seal
the same index write the same bytes (its ledgers were fixed by earlier head CASes), so "already
exists" is success. Trimming raises `trim_seq` and drops whole segments below it (deleted after
the head CAS). Modelled on Pulsar's managed ledger and DistributedLog's log segment metadata.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from metadata import log_record
from metadata.errors import CorruptMetadataError, InvalidMetadataError, UnsupportedFormatVersionError
from metadata.log_record import LogLedger, LogRecord

HEAD_FORMAT_VERSION = 2
HEAD_KEYS = frozenset({"segFirst", "segNext", "deletedSeq", "segmentLedgers"})  # beside the record's own keys
SEGMENT_LEDGERS = 256  # seqs per segment: a segment of 256 ledgers is about 40 KB of JSON
_MAGIC = b"PLOG"
_SEG_MAGIC = b"PLSG"


@dataclass(frozen=True, slots=True)
class LogHead:
    """What the head record says: the record without its sealed ledgers, and where they are."""

    record: LogRecord  # ledgers = the open tail only (seq >= seg_next * SEGMENT_LEDGERS)
    seg_first: int = 0  # first segment still referenced
    seg_next: int = 0  # segments [seg_first, seg_next) hold seqs below seg_next*SEGMENT_LEDGERS
    trim_seq: int = 0  # ledgers with seq below this were trimmed
    # Ledgers of segments with seq below this are deleted. [deleted_seq, trim_seq) is the deletion
    # queue of a trim: those ledgers are listed by the trimmed segments themselves, which are kept
    # until their ledgers are gone (metadata.log_trim), so the head stays bounded however much a
    # trim removes.
    deleted_seq: int = 0
    legacy: bool = False  # read from a format 1 record (converted on the first write)

    @property
    def boundary(self) -> int:
        return self.seg_next * SEGMENT_LEDGERS


def _envelope(magic: bytes, body_obj: dict[str, Any]) -> bytes:
    return log_record.envelope(magic, HEAD_FORMAT_VERSION, body_obj)


def _open(data: bytes, magic_wanted: bytes, where: str) -> tuple[int, bytes]:
    return log_record.open_envelope(data, magic_wanted, HEAD_FORMAT_VERSION, where)


def encode_head(head: LogHead) -> bytes:
    d = log_record.to_json_dict(head.record)
    d["formatVersion"] = HEAD_FORMAT_VERSION
    d["segFirst"], d["segNext"], d["trimSeq"] = head.seg_first, head.seg_next, head.trim_seq
    d["deletedSeq"] = head.deleted_seq
    d["segmentLedgers"] = SEGMENT_LEDGERS
    return _envelope(_MAGIC, d)


def decode_head(data: bytes, name: str) -> LogHead:
    """Format 2 heads, and format 1 records (the whole log in one value) as a head whose tail is
    every ledger: the next write seals them into segments."""
    version, body = _open(data, _MAGIC, f"log {name!r}")
    if version < HEAD_FORMAT_VERSION:
        return LogHead(log_record.decode(data, name), legacy=True)
    try:
        d = json.loads(body)
        if int(d.get("segmentLedgers", SEGMENT_LEDGERS)) != SEGMENT_LEDGERS:
            raise UnsupportedFormatVersionError(f"log {name!r}: segment size {d['segmentLedgers']} not supported")
        d["formatVersion"] = log_record.LOG_FORMAT_VERSION
        rec = log_record.from_json_dict(d, HEAD_KEYS)
        # Heads written before the deletion queue had none pending: their trims listed every
        # trimmed ledger in pendingDeletions and deleted the segments at once.
        deleted = int(d.get("deletedSeq", d["trimSeq"]))
        return LogHead(rec, int(d["segFirst"]), int(d["segNext"]), int(d["trimSeq"]), deleted)
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptMetadataError(f"log {name!r}: stored head is invalid: {exc}") from exc


def encode_segment(ledgers: tuple[LogLedger, ...]) -> bytes:
    return _envelope(_SEG_MAGIC, {"ledgers": [log_record.ledger_to_json(lg) for lg in ledgers]})


def decode_segment(data: bytes, where: str) -> tuple[LogLedger, ...]:
    _, body = _open(data, _SEG_MAGIC, where)
    try:
        return tuple(log_record.ledger_from_json(x) for x in json.loads(body)["ledgers"])
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptMetadataError(f"{where}: stored segment is invalid: {exc}") from exc


@dataclass(frozen=True, slots=True)
class HeadChange:
    """The next head, the segments to create before its CAS and the ones to delete after it."""

    head: LogHead
    new_segments: tuple[tuple[int, tuple[LogLedger, ...]], ...]
    dropped_segments: tuple[int, ...]


def plan_change(old: LogHead, sealed_seqs: list[int], record: LogRecord) -> HeadChange:
    """Split `record` (the full view after a change) against the stored head `old`.

    `sealed_seqs` are the seqs of the old sealed part (in segments, not trimmed); segments are
    immutable, so the change may only drop a prefix of them."""
    boundary = old.boundary
    in_segments = [lg for lg in record.ledgers if lg.seq < boundary]
    trim_seq = max(old.trim_seq, record.trim_seq)
    if in_segments:
        trim_seq = max(trim_seq, in_segments[0].seq)
    elif boundary:
        trim_seq = max(trim_seq, boundary)
    # Only a prefix of the sealed ledgers may go; anything else would rewrite an immutable segment.
    if [lg.seq for lg in in_segments] != [seq for seq in sealed_seqs if seq >= trim_seq]:
        raise InvalidMetadataError(f"log {record.name}: ledgers below seq {boundary} are sealed in segments")
    tail = [lg for lg in record.ledgers if lg.seq >= boundary]
    seg_next, new_segments, tail = _seal_full_segments(old.seg_next, tail, record.next_seq)
    if not tail and not new_segments and not in_segments:
        trim_seq = max(trim_seq, seg_next * SEGMENT_LEDGERS)
    # This view lists every trimmed ledger in pending deletions, so the segments below the trim
    # can go at once, unless a head-only trim's deletion queue still needs them.
    queue_empty = old.deleted_seq >= old.trim_seq
    deleted_seq = trim_seq if queue_empty else old.deleted_seq
    return _head_change(old, record, tail, new_segments, seg_next, trim_seq, deleted_seq)


def _seal_full_segments(seg_next: int, tail: list[LogLedger], next_seq: int
                        ) -> tuple[int, list[tuple[int, tuple[LogLedger, ...]]], list[LogLedger]]:
    """Move each complete, all-sealed range of SEGMENT_LEDGERS seqs off the tail into a segment."""
    new_segments: list[tuple[int, tuple[LogLedger, ...]]] = []
    while True:
        end = (seg_next + 1) * SEGMENT_LEDGERS
        full = [lg for lg in tail if lg.seq < end]
        # next_seq == end would leave the tail empty: the log's last ledger stays in the head, so
        # the head view always shows whether the log has ledgers and which is its newest.
        if next_seq <= end or not all(lg.sealed for lg in full):
            break
        new_segments.append((seg_next, tuple(full)))
        tail = tail[len(full):]
        seg_next += 1
    return seg_next, new_segments, tail


def _head_change(old: LogHead, record: LogRecord, tail: list[LogLedger],
                 new_segments: list[tuple[int, tuple[LogLedger, ...]]], seg_next: int, trim_seq: int,
                 deleted_seq: int) -> HeadChange:
    seg_first = min(trim_seq // SEGMENT_LEDGERS, seg_next)
    dropped = tuple(range(stored_from(old.seg_first, old.deleted_seq),
                          min(stored_from(seg_first, deleted_seq), old.seg_next)))
    head = LogHead(replace(record, ledgers=tuple(tail), trim_seq=trim_seq), seg_first, seg_next, trim_seq,
                   min(deleted_seq, trim_seq))
    return HeadChange(head, tuple(new_segments), dropped)


def stored_from(seg_first: int, deleted_seq: int) -> int:
    """The first segment record still stored: one is deleted only when no reader needs it (below
    seg_first) and its trimmed ledgers are deleted (below deleted_seq)."""
    return min(seg_first, deleted_seq // SEGMENT_LEDGERS)


def plan_head_change(old: LogHead, record: LogRecord) -> HeadChange:
    """Split a change of the head VIEW: `record.ledgers` is the old tail changed (appended,
    sealed, a prefix removed by a trim), `record.trim_seq` may rise to trim sealed segments too.
    Never needs the sealed segments: segments are immutable and numbered, so the head's counters
    say everything. Trimmed segment ledgers join the deletion queue [deleted_seq, trim_seq)."""
    boundary = old.boundary
    if record.ledgers and record.ledgers[0].seq < boundary:
        raise InvalidMetadataError(f"log {record.name}: ledgers below seq {boundary} are sealed in segments")
    new_seqs = {lg.seq for lg in record.ledgers}
    removed = [lg.seq for lg in old.record.ledgers if lg.seq not in new_seqs]
    kept = [lg.seq for lg in old.record.ledgers if lg.seq in new_seqs]
    if removed and kept and removed[-1] > kept[0]:
        raise InvalidMetadataError(f"log {record.name}: only a prefix of the log can be trimmed")
    trim_seq = max(old.trim_seq, record.trim_seq, removed[-1] + 1 if removed else 0)
    trim_seq = min(trim_seq, record.next_seq)
    tail = [lg for lg in record.ledgers if lg.seq >= trim_seq]
    if len(tail) != len(record.ledgers):
        raise InvalidMetadataError(f"log {record.name}: ledgers below the trim point {trim_seq} are still listed")
    seg_next, new_segments, tail = _seal_full_segments(old.seg_next, tail, record.next_seq)
    # The queue holds only seqs trimmed while in segments; the tail's are listed in pending
    # deletions (bounded: the tail holds at most about one segment's worth).
    if old.deleted_seq < old.trim_seq:
        deleted_seq = old.deleted_seq  # a queue is pending: it only grows at its end
    elif old.trim_seq < boundary and trim_seq > old.trim_seq:
        deleted_seq = old.trim_seq  # sealed segments trimmed now: their ledgers are the queue
    else:
        deleted_seq = trim_seq  # nothing in segments trimmed: nothing queued
    return _head_change(old, record, tail, new_segments, seg_next, trim_seq, deleted_seq)
