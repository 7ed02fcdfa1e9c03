"""The add path's bytes on the bookie: a run body left where it arrived (bookie.add_runs),
large entries journaled and logged as their parts (records.encode_add_batch), and the entry
log's page cache kept to a window behind its end (storage.page_cache). Each must keep exactly
what the copying code did: the same parsed request, the same journal bytes, the same recovery
of torn records."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from crc32c import crc32c
from google.protobuf.message import DecodeError

from bookie.add_runs import SPLIT_FRAME_BYTES_MIN, parse_add_request
from bookie.config import BookieConfig
from bookie.errors import BookieError
from bookie.proto import bookie_pb2 as pb
from bookie.proto.wire import encode_varint
from bookie.status import Status
from bookie.storage import JournalCorruptionError, page_cache, records
from bookie.storage.entry_log import EntryLogs
from bookie.storage.page_cache import LAG_STEPS, STEP_BYTES, CacheWindow
from tests.bookie.test_storage_journal import flip_byte, record_offsets
from tests.bookie.test_storage_support import add_ids, crash_copy, journal_files, open_engine, read_all_ok

LG = (5, 0xB16)
BIG = 40 * 1024  # entries over records.SEPARATE_ENTRY_BYTES_MIN


def run_batch(request_id: int, lengths: list[int], fill: int) -> pb.AddBatch:
    return pb.AddBatch(request_id=request_id, ledger=pb.LedgerRef(scope_id=1, ledger_id=request_id),
                       master_key=b"k" * 20, entry_ids=range(len(lengths)), lacs=[-1] * len(lengths),
                       run_lengths=lengths, run_body=bytes([fill]) * sum(lengths))


def test_a_large_frame_parses_as_protobuf_does_with_each_run_body_a_view_of_the_frame() -> None:
    single = pb.AddBatch(request_id=3, ledger=pb.LedgerRef(ledger_id=9), entry_ids=[0], lacs=[-1], entries=[b"one"])
    request = pb.AddRequest(batches=[run_batch(1, [100_000, 60_000], 0xAA), single, run_batch(2, [5], 0xBB)])
    frame = bytearray(request.SerializeToString())
    assert len(frame) >= SPLIT_FRAME_BYTES_MIN

    parsed, bodies = parse_add_request(frame)

    assert [b.run_body for b in parsed.batches] == [b"", b"", b""]  # cut out: never copied
    assert bodies[1] is None  # separate entries: protobuf's own
    assert bodies[0] is not None and bodies[2] is not None
    assert bodies[0].obj is frame and bodies[2].obj is frame  # views, not copies
    assert bytes(bodies[0]) == request.batches[0].run_body and bytes(bodies[2]) == request.batches[2].run_body
    for got, want in zip(parsed.batches, request.batches, strict=True):
        want = pb.AddBatch.FromString(want.SerializeToString())
        want.ClearField("run_body")
        assert got == want


def test_a_repeated_run_body_field_keeps_the_last_as_protobuf_does() -> None:
    first = run_batch(1, [SPLIT_FRAME_BYTES_MIN], 0x11).SerializeToString()
    second = pb.AddBatch(run_body=b"\x22" * SPLIT_FRAME_BYTES_MIN).SerializeToString()
    batch = first + second  # protobuf merges the concatenation: the last run_body wins
    frame = b"\x0a" + encode_varint(len(batch)) + batch
    parsed, [body] = parse_add_request(frame)
    assert body is not None and bytes(body) == pb.AddRequest.FromString(frame).batches[0].run_body


@pytest.mark.parametrize("damage", ["truncated", "unknown top-level field"])
def test_a_frame_the_walk_does_not_know_is_left_to_protobuf(damage: str) -> None:
    frame = pb.AddRequest(batches=[run_batch(1, [SPLIT_FRAME_BYTES_MIN], 0x33)]).SerializeToString()
    if damage == "truncated":
        with pytest.raises(DecodeError):
            pb.AddRequest.FromString(frame[:-10])
        with pytest.raises(DecodeError):
            parse_add_request(frame[:-10])
        return
    frame += b"\x10\x01"  # field 2, a varint: unknown to AddRequest, which protobuf keeps aside
    parsed, bodies = parse_add_request(frame)
    assert bodies == [None] and parsed == pb.AddRequest.FromString(frame)


def test_large_entries_make_the_same_journal_record_as_the_joined_encoding(monkeypatch: pytest.MonkeyPatch) -> None:
    entries = [(7, 6, os.urandom(BIG)), (8, 7, memoryview(os.urandom(BIG + 3))), (9, 8, b""),
               (10, 9, os.urandom(records.COMBINE_BYTES_MIN)), (11, 10, os.urandom(3 * 2**20 + 17))]
    parted = records.encode_add_batch(1, 2, entries, 2**22, 2**62)
    monkeypatch.setattr(records, "SEPARATE_ENTRY_BYTES_MIN", 2**40)  # everything joined, as before
    joined = records.encode_add_batch(1, 2, entries, 2**22, 2**62)

    assert len(joined.parts) == 2 and len(parted.parts) > 2
    assert b"".join(parted.parts) == b"".join(joined.parts)
    assert parted.record_bytes == joined.record_bytes == len(b"".join(joined.parts))
    assert b"".join(parted.region) == b"".join(joined.region)
    header = records.RECORD_HEADER.unpack(parted.parts[0])
    assert header[2] == crc32c(b"".join(parted.parts[1:]))  # the chained crc is the body's crc
    assert records.decode_add_batch(b"".join(parted.parts[1:])).ids == [7, 8, 9, 10, 11]


def crashed_with_large_batches(tmp_path: Path, batches: int) -> Path:
    """A crash image after `batches` acknowledged batches of 3 large entries (ids 3*i ..)."""
    engine = open_engine(tmp_path / "live")
    try:
        for i in range(batches):
            assert add_ids(engine, LG, range(3 * i, 3 * i + 3), size=BIG) == Status.OK
        read_all_ok(engine, LG, range(3 * batches), size=BIG)
        return crash_copy(tmp_path / "live", tmp_path / "crashed")
    finally:
        engine.close()


def test_large_entries_replay_from_the_journal_and_a_torn_last_record_is_dropped(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data_dir = crashed_with_large_batches(tmp_path, 4)
    [journal] = journal_files(data_dir)
    offset, length = record_offsets(journal)[-1]
    with open(journal, "r+b") as f:
        f.truncate(offset + length // 2)  # the last batch torn inside its second entry
    caplog.set_level(logging.WARNING, logger="bookie.storage")
    engine = open_engine(data_dir)
    try:
        assert any("torn tail" in r.getMessage() for r in caplog.records)
        read_all_ok(engine, LG, range(9), size=BIG)
        assert engine.read_entry(LG, 9).status == Status.NO_SUCH_ENTRY
    finally:
        engine.close()


def test_a_flipped_byte_inside_a_large_entry_is_caught_by_the_record_crc(tmp_path: Path) -> None:
    data_dir = crashed_with_large_batches(tmp_path, 3)
    [journal] = journal_files(data_dir)
    offset, length = record_offsets(journal)[2]  # record 0 is the master key: this is batch 1
    flip_byte(journal, offset + length - 100)  # inside the last entry's data
    with pytest.raises(JournalCorruptionError) as err:
        open_engine(data_dir)
    assert err.value.path == journal and err.value.offset == offset


def test_the_cache_window_advises_only_bytes_behind_the_window_and_each_of_them_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    advised: list[tuple[int, int]] = []
    monkeypatch.setattr(page_cache.os, "posix_fadvise",
                        lambda fd, start, length, advice: advised.append((start, start + length)))
    window_bytes = 3 * STEP_BYTES
    cache = CacheWindow(fd=99, window_bytes=window_bytes)
    end = 0
    for size in [700_000] * 200:  # appends of uneven size, 140 MB in all
        end += size
        cache.appended(end)
        assert not advised or advised[-1][1] <= end - window_bytes  # never inside the window
    assert advised and all(start < stop for start, stop in advised)
    covered_twice_upto = end - window_bytes - LAG_STEPS * STEP_BYTES
    for offset in range(0, covered_twice_upto, STEP_BYTES // 2):
        assert sum(start <= offset < stop for start, stop in advised) >= 2, offset


def test_the_cache_window_refuses_a_negative_window() -> None:
    with pytest.raises(ValueError, match="window_bytes"):
        CacheWindow(fd=0, window_bytes=-1)


def test_entry_logs_keep_every_page_with_a_window_of_zero_and_advise_with_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    advised: list[int] = []
    monkeypatch.setattr(page_cache.os, "posix_fadvise", lambda fd, start, length, advice: advised.append(fd))
    region = [os.urandom(STEP_BYTES)]
    for window_bytes, want_advice in ((0, False), (STEP_BYTES, True)):
        advised.clear()
        logs = EntryLogs([tmp_path / f"w{window_bytes}"], 2**30, fsync=False, cache_window_bytes=window_bytes)
        try:
            for _ in range(4):
                logs.append_regions([region])
        finally:
            logs.close()
        assert bool(advised) == want_advice, window_bytes


def test_a_negative_entry_log_cache_is_refused_by_name() -> None:
    with pytest.raises(BookieError, match="entry-log-cache-mb"):
        BookieConfig(metadata_uri="sqlite:///x.db", data_dir=Path("/tmp/x"), entry_log_cache_mb=-1).validate()
