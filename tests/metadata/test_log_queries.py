"""Committed batch ids per query id without a cap (issue 19 item 3), on both stores.

The commit below is the sink's compare-and-set change (datasource/streaming.commit_stream_batch)
without Spark or bookies: append the batch's ledger and record (query id, batch id) in one CAS,
or append nothing when the batch is already recorded. LEDGER_QUERY_IDS sets how many query ids:
1,000 by default (CI time), 5,000 is the acceptance run (83 s on ZooKeeper)."""

from __future__ import annotations

import os

from metadata import log_queries, log_record
from metadata.ids import LedgerId
from metadata.log_record import LogRecord
from metadata.logs import LogManager
from metadata.paths import log_path
from metadata.store import MetadataStore
from metadata.uri import open_store

QUERIES = int(os.environ.get("LEDGER_QUERY_IDS", "1000"))


def _commit(logs: LogManager, name: str, query_id: str, batch_id: int, ledger: int) -> bool:
    appended = [False]

    def change(rec: LogRecord) -> LogRecord | None:
        done = logs.committed_batch(rec, query_id)
        appended[0] = not (done is not None and done >= batch_id)
        if not appended[0]:
            return None
        return rec.with_ledgers_appended([LedgerId(0, ledger)], [(1, 1)]).with_committed_batch(query_id, batch_id)

    logs.update(name, change)
    return appended[0]


def test_many_query_ids_stay_exactly_once_across_a_restart(store_uri: str) -> None:
    with open_store(store_uri) as store:
        logs = LogManager(store)
        logs.create(LogRecord("many"))
        for q in range(QUERIES):
            assert _commit(logs, "many", f"query-{q}", 0, 1 + q)
        head_bytes = len(store.read(log_path("many")).value)
    with open_store(store_uri) as store:  # a restart: nothing in memory survives
        logs = LogManager(store)
        replays = [_commit(logs, "many", f"query-{q}", 0, 100_000 + q) for q in range(QUERIES)]
        assert not any(replays)
        assert _commit(logs, "many", "query-7", 1, 200_000)
        rec, _ = logs.read("many")
        ids = [lg.ledger_id.id for lg in rec.ledgers]
        assert ids == list(range(1, QUERIES + 1)) + [200_000]
        assert all(logs.committed_batch(rec, f"query-{q}") == (1 if q == 7 else 0) for q in range(QUERIES))
    # The head carries one pair, not 5,000: it stays far below the old record's cap.
    assert head_bytes < 64 * 1024


def test_crash_between_head_cas_and_query_record(store: MetadataStore) -> None:
    logs = LogManager(store)
    logs.create(LogRecord("crash"))
    assert _commit(logs, "crash", "q1", 3, 1)
    store.delete(log_queries.query_path("crash", "q1"))  # as if the writer died right after the head CAS
    assert not _commit(logs, "crash", "q1", 3, 2)  # the replay sees the head's pair
    assert _commit(logs, "crash", "q2", 0, 3)  # the next commit writes q1's record before its CAS
    assert log_queries.read_batch(store, "crash", "q1") == 3
    assert not _commit(logs, "crash", "q1", 3, 4)
    assert [lg.ledger_id.id for lg in logs.read("crash")[0].ledgers] == [1, 3]


def test_old_record_committed_batches_move_to_query_records(store: MetadataStore) -> None:
    old = LogRecord("oldq")
    for q in range(50):
        old = old.with_committed_batch(f"w{q}", q)
    store.create(log_path("oldq"), log_record.encode(old))
    logs = LogManager(store)
    assert _commit(logs, "oldq", "new", 0, 1)
    rec, _ = logs.read("oldq")
    assert rec.committed_batches == (("new", 0),)
    assert [logs.committed_batch(rec, f"w{q}") for q in range(50)] == list(range(50))
    assert not _commit(logs, "oldq", "w9", 9, 2)
