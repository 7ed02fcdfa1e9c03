"""trim_log on a long log (issue 19 item 3), both stores: one head CAS whatever it removes, the
ledgers' deletion bounded per call and queued for the next, a crash mid-deletion finished by the
next pass with every trimmed ledger deleted exactly as asked. The ledger deletes go to a recording
stand-in (the log's metadata is real); tests/client/test_log.py trims logs of real ledgers."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from metadata import LedgerId, NoSuchLedgerError, log_record
from metadata import log_segments as segs
from metadata.log_record import LogRecord
from metadata.logs import LogManager
from metadata.paths import log_path, log_segments_path
from metadata.store import MetadataStore
from pyspark_ledger.log.position import Position
from pyspark_ledger.log.retention import trim_log

SEG = segs.SEGMENT_LEDGERS


@dataclass
class RecordingDeletes:
    """The LedgerService a trim needs: real log metadata, ledger deletes recorded."""

    logs: LogManager
    deleted: list[LedgerId] = field(default_factory=list)

    def delete_ledger(self, ledger_id: LedgerId) -> None:
        if ledger_id in self.deleted:
            raise NoSuchLedgerError(f"ledger {ledger_id} already deleted")
        self.deleted.append(ledger_id)


def _long_log(store: MetadataStore, name: str, ledgers: int) -> LogManager:
    logs = LogManager(store)
    logs.create(LogRecord(name))
    for i in range(ledgers):
        logs.update_head(name, lambda r, i=i: r.with_ledgers_appended([LedgerId(0, 1 + i)], [(1, 10)]))
    return logs


def test_trim_deletes_a_bounded_batch_per_call_and_queues_the_rest(store: MetadataStore) -> None:
    logs = _long_log(store, "long", 6 * SEG + 10)
    svc = RecordingDeletes(logs)
    cut = 5 * SEG + 3
    first = trim_log(svc, "long", before=Position(cut, 0, LedgerId(0, 1 + cut)), delete_max=SEG)
    assert len(first) == SEG  # the rest is queued, not forgotten
    head, _ = logs.read_head("long")
    assert head.trim_seq == cut and head.deleted_seq < cut
    assert len(segs.encode_head(head)) < 64 * 1024  # the queue is not in the head
    for _ in range(10):  # bounded: later calls (any criteria) drain the queue
        if not trim_log(svc, "long", before=Position(cut, 0, LedgerId(0, 1 + cut)), delete_max=SEG):
            break
    assert sorted(lid.id for lid in svc.deleted) == list(range(1, cut + 1))
    assert [lg.seq for lg in LogManager(store).read("long")[0].ledgers] == list(range(cut, 6 * SEG + 10))
    assert store.children(log_segments_path("long")) == [f"{i:012d}" for i in range(5, 6)]


def test_a_crash_mid_deletion_is_finished_by_the_next_trim(store: MetadataStore) -> None:
    logs = _long_log(store, "crashy", 3 * SEG + 5)
    svc = RecordingDeletes(logs)
    deletes_before_crash = [40]

    def crash_at(step: str) -> None:
        if step == "after_delete":
            deletes_before_crash[0] -= 1
            if deletes_before_crash[0] == 0:
                raise RuntimeError("injected crash")

    with pytest.raises(RuntimeError):
        trim_log(svc, "crashy", before=Position(2 * SEG + 1, 0, LedgerId(0, 2 * SEG + 2)), crash_hook=crash_at)
    assert len(svc.deleted) == 40
    trim_log(svc, "crashy")  # no criteria: finishes the queue
    assert sorted(lid.id for lid in svc.deleted) == list(range(1, 2 * SEG + 2))
    head, _ = logs.read_head("crashy")
    assert head.deleted_seq == head.trim_seq == 2 * SEG + 1 and not head.record.pending_deletions


def test_a_format_1_record_converts_on_its_first_head_commit(store: MetadataStore) -> None:
    old = LogRecord("legacy")
    for i in range(2 * SEG + 7):
        old = old.with_ledgers_appended([LedgerId(0, 100 + i)], [(2, 20)])
    store.create(log_path("legacy"), log_record.encode(old))  # what the old code wrote
    logs = LogManager(store)
    logs.update_head("legacy", lambda r: r.with_ledger(LedgerId(0, 9_999)))
    head, _ = logs.read_head("legacy")
    assert not head.legacy and head.seg_next == 2 and len(head.record.ledgers) == 8
    full, _ = LogManager(store).read("legacy")
    assert [lg.ledger_id.id for lg in full.ledgers] == [100 + i for i in range(2 * SEG + 7)] + [9_999]
