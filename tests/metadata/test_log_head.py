"""Head-only commits (issue 19 item 1): LogManager.update_head never reads a sealed segment, on
both stores, whatever the log's length; the full view still agrees with what it wrote."""

from __future__ import annotations

import pytest

from metadata import log_segments as segs
from metadata.errors import InvalidMetadataError
from metadata.ids import LedgerId
from metadata.log_record import LogLedger, LogRecord
from metadata.log_segments import LogHead
from metadata.logs import LogManager
from metadata.paths import log_path, log_segment_path, log_segments_path
from metadata.store import MetadataStore, Versioned

SEG = segs.SEGMENT_LEDGERS


class CountingGets:
    """Counts the store's gets (every read of a record goes through get), segment gets apart."""

    def __init__(self, store: MetadataStore, name: str):
        self.gets = 0
        self.segment_gets = 0
        inner = store.get
        prefix = log_segments_path(name) + "/"

        def counted(path: str) -> Versioned | None:
            self.gets += 1
            self.segment_gets += path.startswith(prefix)
            return inner(path)

        store.get = counted

    def reset(self) -> None:
        self.gets = self.segment_gets = 0


def prefill(store: MetadataStore, name: str, segments: int, tail: int) -> None:
    """A log of `segments` full segments and `tail` sealed ledgers in the head (direct writes)."""
    total = segments * SEG + tail

    def lg(s: int) -> LogLedger:
        return LogLedger(s, LedgerId(0, 1 + s), 0, 1, 10)

    head = LogHead(LogRecord(name, ledgers=tuple(lg(s) for s in range(segments * SEG, total)), next_seq=total),
                   0, segments, 0)
    store.create(log_path(name), segs.encode_head(head))
    for index in range(segments):
        store.create(log_segment_path(name, index),
                     segs.encode_segment(tuple(lg(s) for s in range(index * SEG, (index + 1) * SEG))))


def test_a_commit_on_a_10_segment_log_reads_only_the_head(store: MetadataStore) -> None:
    prefill(store, "ten", 10, 3)
    counter = CountingGets(store, "ten")
    logs = LogManager(store)
    for i in range(3):
        logs.update_head("ten", lambda r, i=i: r.with_ledgers_appended([LedgerId(0, 900_000 + i)], [(1, 10)]))
    assert counter.segment_gets == 0 and counter.gets <= 3 * 2
    rec, _ = logs.read_tail("ten")
    assert [lg.seq for lg in rec.ledgers] == list(range(10 * SEG, 10 * SEG + 6))
    # The same change through the full view reads every segment: the counter catches a commit
    # path that does (a fresh manager, no cache).
    counter.reset()
    LogManager(store).update("ten", lambda r: r.with_ledgers_appended([LedgerId(0, 900_100)], [(1, 10)]))
    assert counter.segment_gets >= 10


def test_update_head_seals_full_segments_and_the_full_view_agrees(store: MetadataStore) -> None:
    logs = LogManager(store)
    logs.create(LogRecord("h"))
    for i in range(2 * SEG + 4):
        logs.update_head("h", lambda r, i=i: r.with_ledger(LedgerId(0, 1 + i)))
        logs.update_head("h", lambda r, i=i: r.with_sealed(LedgerId(0, 1 + i), 1, 10))
    head, _ = logs.read_head("h")
    assert head.seg_next == 2 and [lg.seq for lg in head.record.ledgers] == list(range(2 * SEG, 2 * SEG + 4))
    assert store.children(log_segments_path("h")) == [f"{i:012d}" for i in range(2)]
    full, _ = LogManager(store).read("h")
    assert [lg.ledger_id.id for lg in full.ledgers] == list(range(1, 2 * SEG + 5))
    assert all(lg.sealed for lg in full.ledgers)


def test_an_open_ledger_keeps_its_range_in_the_head(store: MetadataStore) -> None:
    logs = LogManager(store)
    logs.create(LogRecord("o"))
    logs.update_head("o", lambda r: r.with_ledger(LedgerId(0, 1)))  # seq 0 stays open
    for i in range(SEG + 2):
        logs.update_head("o", lambda r, i=i: r.with_ledgers_appended([LedgerId(0, 10 + i)], [(1, 10)]))
    head, _ = logs.read_head("o")
    assert head.seg_next == 0 and len(head.record.ledgers) == SEG + 3


def test_a_head_change_cannot_remove_a_ledger_from_the_middle(store: MetadataStore) -> None:
    logs = LogManager(store)
    logs.create(LogRecord("m"))
    for i in range(3):
        logs.update_head("m", lambda r, i=i: r.with_ledgers_appended([LedgerId(0, 1 + i)], [(1, 10)]))
    with pytest.raises(InvalidMetadataError):
        logs.update_head("m", lambda r: r.without_ledgers({LedgerId(0, 2)}))


def test_reading_from_a_middle_position_fetches_only_its_segments(store: MetadataStore) -> None:
    from itertools import islice
    from types import SimpleNamespace

    from pyspark_ledger.log.reader import LogReader

    prefill(store, "mid", 10, 3)
    counter = CountingGets(store, "mid")
    reader = LogReader(SimpleNamespace(logs=LogManager(store)), "mid")
    try:
        assert counter.segment_gets == 0  # opening reads the head only
        got = list(islice(reader._ledgers(5 * SEG + 3), SEG))  # the read's ledger walk
        assert [lg.seq for lg in got] == list(range(5 * SEG + 3, 6 * SEG + 3))
        assert counter.segment_gets == 2  # segments 5 and 6, nothing before, nothing after
        counter.reset()
        assert reader.earliest() is not None and reader.earliest().seq == 0
        assert counter.segment_gets == 1  # the first segment, once (then cached)
    finally:
        reader.close()


def test_trim_is_one_head_cas_and_the_queue_drains_in_bounded_batches(store: MetadataStore) -> None:
    from metadata import log_trim

    prefill(store, "t", 10, 3)
    logs = LogManager(store)
    cut = 8 * SEG + 5
    logs.update_head("t", lambda r: r.trimmed_to(cut))
    head, _ = logs.read_head("t")
    assert (head.trim_seq, head.deleted_seq, head.seg_first) == (cut, 0, 8) and not head.record.pending_deletions
    assert len(store.children(log_segments_path("t"))) == 10  # the queue: kept until their ledgers go
    full, _ = LogManager(store).read("t")
    assert full.ledgers[0].seq == cut and len(full.ledgers) == 10 * SEG + 3 - cut
    deleted: list[int] = []
    for _ in range(64):  # bounded: 8 segments' worth in batches of one segment
        batch = log_trim.next_batch(logs, "t", limit=SEG)
        if batch is None:
            break
        assert len(batch.ledgers) <= SEG
        deleted.extend(lid.id - 1 for lid in batch.ledgers)  # prefill: ledger id = seq + 1
        log_trim.finish_batch(logs, "t", batch)
    assert sorted(set(deleted)) == list(range(cut))
    head, _ = logs.read_head("t")
    assert head.deleted_seq == cut
    assert store.children(log_segments_path("t")) == [f"{i:012d}" for i in (8, 9)]


def test_a_crash_between_trim_steps_leaks_nothing(store: MetadataStore) -> None:
    """Crash after the ledgers of a batch were deleted and its segment records dropped, before the
    head CAS moving the queue: the next pass finds nothing missing and loses nothing."""
    from metadata import log_trim
    from metadata.errors import MetadataUnavailableError

    prefill(store, "c", 6, 3)
    logs = LogManager(store)
    logs.update_head("c", lambda r: r.trimmed_to(4 * SEG))
    deleted: set[int] = set()
    first = log_trim.next_batch(logs, "c", limit=2 * SEG)
    assert first is not None
    deleted |= {lid.id - 1 for lid in first.ledgers}
    real_cas = store.compare_and_set

    def crash(path: str, value: bytes, expected_version: int) -> int:
        raise MetadataUnavailableError("injected: the process died before the head CAS")

    store.compare_and_set = crash
    with pytest.raises(MetadataUnavailableError):
        log_trim.finish_batch(logs, "c", first)
    store.compare_and_set = real_cas
    assert logs.read_head("c")[0].deleted_seq == 0  # the queue did not move
    fresh = LogManager(store)  # the next pass, in a new process
    for _ in range(16):
        batch = log_trim.next_batch(fresh, "c", limit=SEG)
        if batch is None:
            break
        deleted |= {lid.id - 1 for lid in batch.ledgers}
        log_trim.finish_batch(fresh, "c", batch)
    assert deleted == set(range(4 * SEG))
    assert fresh.read_head("c")[0].deleted_seq == 4 * SEG
    assert store.children(log_segments_path("c")) == [f"{i:012d}" for i in (4, 5)]
    assert [lg.seq for lg in fresh.read("c")[0].ledgers] == list(range(4 * SEG, 6 * SEG + 3))
