"""Deleting a log deletes what streaming queries kept about it (their writer epochs and their
rows/bytes records), on both stores; another log's records stay."""

from __future__ import annotations

from metadata.log_record import LogRecord
from metadata.logs import LogManager
from metadata.paths import sink_epoch_path, sink_epochs_path, sink_progress_log_path, sink_progress_path
from metadata.store import MetadataStore

QUERY = "5b1c0e6e-8f07-4c55-a1f1-4b7c4a1a9d10"  # a Spark query id


def test_a_deleted_log_takes_its_streaming_records_with_it(store: MetadataStore) -> None:
    logs = LogManager(store)
    for name in ("gone", "kept"):
        logs.create(LogRecord(name))
        store.create(sink_epoch_path(name, QUERY), b'{"epoch": 1}')
        store.create(sink_progress_path(name, QUERY), b'{"batchId": 0}')
    logs.delete("gone")
    assert store.get(sink_epoch_path("gone", QUERY)) is None and store.get(sink_epochs_path("gone")) is None
    assert store.get(sink_progress_path("gone", QUERY)) is None and store.get(sink_progress_log_path("gone")) is None
    assert store.get(sink_epoch_path("kept", QUERY)) is not None
    assert store.get(sink_progress_path("kept", QUERY)) is not None
