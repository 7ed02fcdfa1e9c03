"""Admission control and offsets of the stream source, on hand-made scans (no cluster, no JVM)."""

from __future__ import annotations

import pytest

from pyspark_ledger.datasource.errors import LedgerSourceError
from pyspark_ledger.datasource.stream.admission import Limit, admit, bytes_of_first, lag_after, offset_after
from pyspark_ledger.datasource.stream.offsets import LogOffset, offset_from_json, offset_to_json
from pyspark_ledger.datasource.stream.scan import Chunk, LogScan

LID = "00000000000000000000000000000007"


def scan(name: str, *sizes: tuple[int, int], start_seq: int = 0) -> LogScan:
    """A log whose ledgers from `start_seq` on are sealed with (entries, bytes) each."""
    chunks = []
    for i, (n, size) in enumerate(sizes):
        seq = start_seq + i
        chunks.append(Chunk(seq, LID, 0, n - 1, size, LogOffset(seq + 1, 0)))
    return LogScan(name, LogOffset(start_seq, 0), tuple(chunks))


def test_everything_without_a_limit_and_the_lag_is_what_is_left() -> None:
    a = scan("a", (100, 1100), (100, 1100))
    assert admit({"a": a}, Limit()) == {"a": 200}
    assert offset_after(a, 200) == LogOffset(2, 0) and offset_after(a, 0) == LogOffset(0, 0)
    assert offset_after(a, 150) == LogOffset(1, 50, LID)
    assert lag_after(a, 150) == (50, 550)


def test_max_entries_is_shared_in_proportion_to_what_each_log_has() -> None:
    logs = {"a": scan("a", (300, 300)), "b": scan("b", (100, 100)), "c": scan("c")}
    assert admit(logs, Limit(max_entries=100)) == {"a": 75, "b": 25, "c": 0}
    assert admit(logs, Limit(max_entries=3)) == {"a": 2, "b": 1, "c": 0}  # largest remainder first
    assert sum(admit(logs, Limit(max_entries=7)).values()) == 7


def test_max_bytes_counts_sealed_sizes_and_both_limits_hold() -> None:
    a = scan("a", (100, 1100), (100, 2200))  # 11 then 22 bytes an entry
    assert admit({"a": a}, Limit(max_bytes=1100 + 220)) == {"a": 110}
    assert bytes_of_first(a, 110) == 1320
    assert admit({"a": a}, Limit(max_entries=50, max_bytes=330)) == {"a": 30}
    assert admit({"a": a}, Limit(max_entries=20, max_bytes=330)) == {"a": 20}


def test_one_huge_entry_still_moves_the_stream() -> None:
    big = scan("a", (3, 30_000_000))
    assert admit({"a": big, "b": scan("b")}, Limit(max_bytes=1000)) == {"a": 1, "b": 0}


def test_offsets_round_trip_and_old_checkpoints_are_one_logs() -> None:
    offset = {"b": LogOffset(3, 7, LID), "a": LogOffset(0, 0)}
    as_json = offset_to_json(offset)
    assert list(as_json) == ["a", "b"] and as_json["b"] == {"seq": 3, "ledger": LID, "entry": 7}
    assert offset_from_json(as_json, None) == offset
    old = {"seq": 3, "entry": 7, "ledger": LID}  # written before issue 22
    assert offset_from_json(old, "events") == {"events": LogOffset(3, 7, LID)}
    with pytest.raises(LedgerSourceError, match="reads several logs"):
        offset_from_json(old, None)
    with pytest.raises(LedgerSourceError, match="not a ledger stream position"):
        offset_from_json({"a": {"seq": -1, "entry": 0}}, None)
