"""Run-encoded Read answers (ReadRequest.entry_runs) from a real `bookie` process: the same
entries as the per-entry answer, bounded the same way; damaged and missing entries listed by id
between the runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from bookie.proto import bookie_pb2 as pb
from bookie.status import Status
from pyspark_ledger.testing.local_cluster import LocalBookie
from pyspark_ledger.transport.bookie_client import BookieClient
from tests.bookie.server_helpers import add_sync, flip_stored_copies

LEDGER = (0, 9)


def split(resp: pb.ReadResponse) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    for run in resp.runs:
        assert sum(run.lengths) == len(run.data)
        at = 0
        for i, n in enumerate(run.lengths):
            out[run.first_entry_id + i] = run.data[at:at + n]
            at += n
    return out


def runs(resp: pb.ReadResponse) -> list[tuple[int, int]]:
    return [(r.first_entry_id, r.first_entry_id + len(r.lengths) - 1) for r in resp.runs]


def test_runs_carry_the_same_entries_as_the_per_entry_answer(bookie: LocalBookie) -> None:
    entries = [(i, i - 1, f"entry {i}".encode() * (1 + i % 5)) for i in range(300)]
    with BookieClient(bookie.bookie_id, bookie.address) as c:
        assert add_sync(c, LEDGER, entries[:150]) == (Status.OK, "")
        assert add_sync(c, LEDGER, entries[150:]) == (Status.OK, "")
        resp = c.read(LEDGER, 0, 309, max_entries=1000, entry_runs=True)
        assert resp.status == Status.OK and resp.lac == 298
        assert runs(resp) == [(0, 299)] and not resp.entries
        assert list(resp.entry_ids) == list(range(300, 310))
        assert set(resp.entry_status) == {Status.NO_SUCH_ENTRY}
        assert split(resp) == {e: data for e, _, data in entries}
        legacy = c.read(LEDGER, 0, 309, max_entries=1000)
        assert not legacy.runs and list(legacy.entry_ids) == list(range(310))
        assert {e: d for e, s, d in zip(legacy.entry_ids, legacy.entry_status, legacy.entries) if s == Status.OK} == split(resp)


def test_run_answers_respect_the_count_and_byte_bounds(bookie: LocalBookie) -> None:
    with BookieClient(bookie.bookie_id, bookie.address) as c:
        assert add_sync(c, LEDGER, [(i, i - 1, bytes([i]) * 100) for i in range(50)]) == (Status.OK, "")
        resp = c.read(LEDGER, 0, 49, max_entries=7, entry_runs=True)
        assert runs(resp) == [(0, 6)]
        resp = c.read(LEDGER, 10, 49, max_bytes=350, entry_runs=True)
        assert runs(resp) == [(10, 12)] and len(resp.runs[0].data) == 300
        resp = c.read(LEDGER, 10, 49, max_bytes=1, entry_runs=True)  # the first entry always comes back
        assert split(resp) == {10: bytes([10]) * 100}
        bad = c.read(LEDGER, 5, 4, entry_runs=True)
        assert bad.status == Status.INVALID_REQUEST and not bad.runs
        missing = c.read((0, 404), 0, 4, entry_runs=True)
        assert missing.status == Status.NO_SUCH_LEDGER and not missing.runs


@pytest.mark.parametrize("size", [10, 6000], ids=["small entries", "entries served as views"])
def test_a_damaged_entry_splits_the_runs_and_is_named_unknown(tmp_path: Path, size: int) -> None:
    b = LocalBookie(f"sqlite://{tmp_path / 'meta.db'}", tmp_path / "data", extra_args=["--no-verify-ledger-keys"]).start()
    marker = b"<<corrupt-me-please>>" * 10
    # 6000-byte entries: at least range_read.VIEW_BYTES_MIN, verified and sent as views of the pread.
    entries = [(i, i - 1, marker if i == 4 else f"good {i}".encode() * size) for i in range(10)]
    with BookieClient(b.bookie_id, b.address) as c:
        assert add_sync(c, LEDGER, entries) == (Status.OK, "")
    b.stop()  # clean stop: checkpointed, so reads come from the entry log
    assert flip_stored_copies(tmp_path / "data", marker) == 1
    b.start()
    try:
        with BookieClient(b.bookie_id, b.address) as c:
            resp = c.read(LEDGER, 0, 9, entry_runs=True)
            assert resp.status == Status.OK
            assert runs(resp) == [(0, 3), (5, 9)]
            assert list(resp.entry_ids) == [4] and list(resp.entry_status) == [Status.UNKNOWN_ENTRY_STATE]
            assert split(resp) == {e: d for e, _, d in entries if e != 4}
            # The client's zero-copy parser of the same hand-serialized answer reads the same.
            fast = c.read_runs(LEDGER, 0, 9)
            assert [(r.first_entry_id, list(r.lengths), bytes(r.data)) for r in fast.runs] == \
                [(r.first_entry_id, list(r.lengths), r.data) for r in resp.runs]
            assert list(fast.entry_ids) == [4]
    finally:
        b.stop()
