"""Segmented log records (issue 19 item 1-2) on both stores: bounded head, immutable segments,
trimming by whole segments, and the upgrade of a format 1 record on the first write."""

from __future__ import annotations

import pytest

from metadata import log_record
from metadata import log_segments as segs
from metadata.ids import LedgerId
from metadata.log_record import LogRecord
from metadata.logs import LogManager
from metadata.paths import log_path, log_segments_path
from metadata.store import MetadataStore

SEG = segs.SEGMENT_LEDGERS


def _append_sealed(logs: LogManager, name: str, count: int, first_id: int) -> None:
    for i in range(count):
        logs.update(name, lambda r, i=i: r.with_ledgers_appended([LedgerId(0, first_id + i)], [(1, 10)]))


def test_commit_writes_a_bounded_head(store: MetadataStore) -> None:
    logs = LogManager(store)
    logs.create(LogRecord("seg"))
    _append_sealed(logs, "seg", 3 * SEG + 5, 1)
    head_bytes = len(store.read(log_path("seg")).value)
    rec, _ = logs.read("seg")
    assert [lg.ledger_id.id for lg in rec.ledgers] == list(range(1, 3 * SEG + 6))
    assert [lg.seq for lg in rec.ledgers] == list(range(3 * SEG + 5))
    assert store.children(log_segments_path("seg")) == [f"{i:012d}" for i in range(3)]
    head, _ = logs.read_head("seg")
    assert len(head.record.ledgers) == 5 and head.seg_next == 3
    # The head stays small: it holds the tail, not the log.
    assert head_bytes < len(log_record.encode(rec)) / 10
    # A fresh manager (no cache) sees the same log, and fetches only the segments asked for.
    fresh = LogManager(store)
    assert fresh.read("seg")[0].ledgers == rec.ledgers
    tail = fresh.sealed_ledgers("seg", head, from_seq=2 * SEG + 1)
    assert [lg.seq for lg in tail] == list(range(2 * SEG + 1, 3 * SEG))
    assert set(k[1] for k in fresh._segments if k[0] == "seg") == {0, 1, 2}


def test_trim_drops_whole_segments(store: MetadataStore) -> None:
    logs = LogManager(store)
    logs.create(LogRecord("trim"))
    _append_sealed(logs, "trim", 3 * SEG + 2, 1)
    rec, _ = logs.read("trim")
    drop = {lg.ledger_id for lg in rec.ledgers[: 2 * SEG + 3]}
    logs.update("trim", lambda r: r.without_ledgers(drop))
    after, _ = logs.read("trim")
    assert [lg.seq for lg in after.ledgers] == list(range(2 * SEG + 3, 3 * SEG + 2))
    assert set(after.pending_deletions) == drop
    assert store.children(log_segments_path("trim")) == [f"{2:012d}"]
    assert LogManager(store).read("trim")[0].ledgers == after.ledgers


def test_sealed_ledgers_cannot_be_removed_from_the_middle(store: MetadataStore) -> None:
    logs = LogManager(store)
    logs.create(LogRecord("mid"))
    _append_sealed(logs, "mid", SEG + 1, 1)
    rec, _ = logs.read("mid")
    with pytest.raises(ValueError):
        logs.update("mid", lambda r: r.without_ledgers({rec.ledgers[5].ledger_id}))


def test_format_1_record_is_read_and_converted_on_first_write(store: MetadataStore) -> None:
    old = LogRecord("legacy")
    for i in range(2 * SEG + 7):
        old = old.with_ledgers_appended([LedgerId(0, 100 + i)], [(2, 20)])
    old = old.with_committed_batch("q", 4)
    store.create(log_path("legacy"), log_record.encode(old))  # what the old code wrote
    logs = LogManager(store)
    read, version = logs.read("legacy")
    assert read == old
    logs.compare_and_set(read.with_schema("{}", "raw"), version)
    head, _ = logs.read_head("legacy")
    assert not head.legacy and head.seg_next == 2 and len(head.record.ledgers) == 7
    again, _ = LogManager(store).read("legacy")
    assert again.ledgers == old.ledgers and again.committed_batch("q") == 4 and again.schema == "{}"


def test_delete_removes_segments(store: MetadataStore) -> None:
    logs = LogManager(store)
    logs.create(LogRecord("gone"))
    _append_sealed(logs, "gone", SEG + 1, 1)
    logs.delete("gone")
    assert logs.get("gone") is None and store.children(log_segments_path("gone")) == []
    assert "gone" not in logs.names()
