"""The offload room's pure parts: the choice of ledgers, the queue verdict, the record, store URIs,
and a ledger's entries -> Parquet -> entries decoding to the very same messages."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from metadata.ids import LedgerId
from metadata.offload_queue import QueuedAttempt
from metadata.offload_record import OFFLOADED, WRITING, OffloadedFile, OffloadRecord
from metadata.offload_settings import OffloadSettings
from pyspark_ledger.log.messages import messages
from pyspark_ledger.offload.choice import LedgerView, choose
from pyspark_ledger.offload.errors import BadStoreUriError, OffloadedFileError
from pyspark_ledger.offload.parquet_files import RAW_SCHEMA, LedgerFile, write_ledger_file
from pyspark_ledger.offload.queue_verdict import Verdict, verdict
from pyspark_ledger.offload.store import ObjectStore
from pyspark_ledger.protocol.entry_format import BATCH_FORMAT_VERSION, Entry
from pyspark_ledger.protocol.message_batch import NO_TIME, encode_batch
from tests.offload.log_fill import ipc

LID = LedgerId(0, 42)


def views(*sealed_ms: int | None, size: int = 100) -> list[LedgerView]:
    return [LedgerView(i, ms is not None, ms or 0, size, False) for i, ms in enumerate(sealed_ms)]


def test_choice_by_age_by_bytes_and_everything() -> None:
    lgs = views(0, 100, 900, None)  # the last is open
    assert choose(lgs, OffloadSettings(after_ms=500), 1000) == [0, 1]
    assert choose(lgs, OffloadSettings(after_bytes=150), 1000) == [0, 1]  # keep the newest 150 bytes: one ledger
    assert choose(lgs, OffloadSettings(), 1000) == []
    assert choose(lgs, OffloadSettings(), 1000, everything=True) == [0, 1, 2]  # never the open one
    done = [LedgerView(0, True, 0, 100, True), *lgs[1:]]
    assert choose(done, OffloadSettings(after_ms=0), 1000) == [1, 2]  # never twice
    assert choose(lgs, OffloadSettings(after_ms=0), 1000, limit=1) == [0]


def test_queue_verdict() -> None:
    q = QueuedAttempt("ab", LID, "file:///s", ("f",), 1000)
    mine = OffloadRecord(WRITING, "ab", "file:///s", 1000, (OffloadedFile("f"),))
    done = mine.finished((OffloadedFile("f", 1),), 1500, None)
    other = OffloadRecord(OFFLOADED, "cd", "file:///s", 900)
    assert verdict(q, False, None, 1001, 500) is Verdict.DELETE  # the ledger is gone: at once
    assert verdict(q, True, done, 99_999, 500) is Verdict.KEEP  # the recorded attempt's file stays
    assert verdict(q, True, mine, 1400, 500) is Verdict.KEEP  # may still be running
    assert verdict(q, True, mine, 1500, 500) is Verdict.ABANDON
    assert verdict(q, True, other, 1400, 500) is Verdict.KEEP
    assert verdict(q, True, other, 1500, 500) is Verdict.DELETE
    assert verdict(q, True, None, 1500, 500) is Verdict.DELETE


def test_record_round_trip_and_bookie_copies() -> None:
    rec = OffloadRecord(WRITING, "ab", "s3://b/p", 5, (OffloadedFile("x.parquet"),))
    with pytest.raises(ValueError, match="differ"):
        rec.finished((OffloadedFile("y.parquet"),), 10, 0)
    done = rec.finished((OffloadedFile("x.parquet", 7, 9, 1, 2),), 10, 100)
    assert OffloadRecord.from_json(done.to_json()) == done
    assert not done.bookie_copies_deletable(109) and done.bookie_copies_deletable(110)
    assert not rec.finished(rec.files, 10, None).bookie_copies_deletable(10**15)


@pytest.mark.parametrize("uri", ["http://x/y", "file://host/x", "file:relative", "s3://", "s3://key:secret@bucket/p"])
def test_bad_store_uris_are_refused_by_name(uri: str) -> None:
    with pytest.raises(BadStoreUriError, match="offload store"):
        ObjectStore(uri)


def raw_entries() -> list[Entry]:
    batch = encode_batch([b"a", b"", b"c"], [10, 11, 12], keys=[b"k", None, b""], event_ms=[NO_TIME, 5, 6],
                         headers=[[("h", b"1"), ("h", b"2")], [], [("x", b"")]])
    return [Entry(0, b"plain"), Entry(1, batch, format_version=BATCH_FORMAT_VERSION), Entry(2, b""),
            Entry(3, encode_batch([b"z"], [13]), format_version=BATCH_FORMAT_VERSION)]


def test_raw_entries_round_trip_with_their_positions() -> None:
    entries = raw_entries()
    data, facts = write_ledger_file("log", 3, LID, "raw", 99, entries)
    assert (facts.entries, facts.messages) == (4, 6)
    lf = LedgerFile(pa.py_buffer(data), "t")
    back = list(lf.entries(0, 3))
    assert [m for e in back for m in messages(3, LID, e)] == [m for e in entries for m in messages(3, LID, e)]
    assert [e.entry_id for e in lf.entries(1, 2)] == [1, 2]
    table = pq.read_table(pa.BufferReader(data))
    assert table.schema.remove_metadata() == RAW_SCHEMA
    assert table.column("index").to_pylist() == [0, 0, 1, 2, 0, 0]
    assert table.column("timestamp").cast(pa.int64()).to_pylist() == [99, 10, 11, 12, 99, 13]
    with pytest.raises(OffloadedFileError):
        list(lf.entries(0, 4))


def test_arrow_entries_are_row_groups() -> None:
    tables = [pa.table({"id": list(range(i * 3, i * 3 + 3)), "s": ["a", None, "c"]}) for i in range(3)]
    entries = [Entry(i, ipc(t)) for i, t in enumerate(tables)]
    data, facts = write_ledger_file("log", 0, LID, "arrow", 0, entries)
    f = pq.ParquetFile(pa.BufferReader(data))
    assert f.num_row_groups == 3 and facts.row_groups == ((0, 0), (1, 1), (2, 2))
    back = list(LedgerFile(pa.py_buffer(data), "t").entries(1, 2))
    assert [pa.ipc.open_stream(e.payload).read_all() for e in back] == tables[1:]


def test_a_file_without_the_offload_metadata_is_refused() -> None:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"a": [1]}), sink)
    with pytest.raises(OffloadedFileError, match="not an offloaded ledger file"):
        LedgerFile(sink.getvalue(), "plain.parquet")
