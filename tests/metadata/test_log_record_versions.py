"""A log record that survives versions (issue 32 item 1): keys a newer release writes are kept
through decode, encode and every compare-and-set, at the top level, inside `retention` and on a
ledger (in the head's tail and in sealed segments); log settings live in `properties`, which the
previous release keeps too (tests/upgrade/test_mixed_versions.py runs that release)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from metadata import log_record, log_settings
from metadata import log_segments as segs
from metadata.errors import InvalidMetadataError
from metadata.ids import LedgerId
from metadata.log_record import MESSAGE_FORMAT_BATCHED, LogRecord
from metadata.logs import LogManager
from metadata.paths import log_path
from metadata.store import MetadataStore

NEWER_TOP = {"subscriptionsVersion": 7, "futureObject": {"a": [1, 2]}}
NEWER_RETENTION = {"max_cold_bytes": 5}
NEWER_LEDGER = {"offloaded": {"files": 2}}


def _body(store: MetadataStore, name: str) -> dict[str, Any]:
    got = store.read(log_path(name))
    _, body = log_record.open_envelope(got.value, b"PLOG", segs.HEAD_FORMAT_VERSION, name)
    out: dict[str, Any] = json.loads(body)
    return out


def _write_body(store: MetadataStore, name: str, body: dict[str, Any]) -> None:
    """What a newer release's compare-and-set leaves behind."""
    got = store.read(log_path(name))
    data = log_record.envelope(b"PLOG", segs.HEAD_FORMAT_VERSION, body)
    store.compare_and_set(log_path(name), data, got.version)


def test_unknown_keys_round_trip_through_decode_and_encode() -> None:
    body = log_record.to_json_dict(LogRecord("v", next_seq=1, ledgers=(
        log_record.LogLedger(0, LedgerId(0, 5), 1000, 3, 30, 2000),)))
    body.update(NEWER_TOP)
    body["retention"].update(NEWER_RETENTION)
    body["ledgers"][0].update(NEWER_LEDGER)
    rec = log_record.from_json_dict(body)
    assert rec.ledgers[0].sealed_ms == 2000
    again = log_record.to_json_dict(rec)
    assert again == body  # nothing dropped, nothing refused
    # A change this release makes keeps them too.
    changed = log_record.to_json_dict(rec.with_epoch(4))
    assert {k: changed[k] for k in NEWER_TOP} == NEWER_TOP
    assert changed["retention"]["max_cold_bytes"] == 5 and changed["ledgers"][0]["offloaded"] == {"files": 2}


def test_every_compare_and_set_keeps_what_a_newer_release_wrote(store: MetadataStore) -> None:
    logs = LogManager(store)
    logs.create(LogRecord("keep"))
    # Enough sealed ledgers that the head seals a segment: segments must keep ledger keys too.
    for i in range(segs.SEGMENT_LEDGERS + 2):
        logs.update_head("keep", lambda r, i=i: r.with_ledgers_appended([LedgerId(0, 100 + i)], [(1, 10)]))
    body = _body(store, "keep")
    body.update(NEWER_TOP)
    body["retention"].update(NEWER_RETENTION)
    body["ledgers"][-1].update(NEWER_LEDGER)
    _write_body(store, "keep", body)
    fresh = LogManager(store)  # no cached head
    fresh.update_head("keep", lambda r: r.with_epoch(r.writer_epoch + 1))
    for i in range(segs.SEGMENT_LEDGERS):  # the marked ledger goes into a sealed segment
        fresh.update_head("keep", lambda r, i=i: r.with_ledgers_appended([LedgerId(0, 900 + i)], [(1, 10)]))
    after = _body(store, "keep")
    assert {k: after[k] for k in NEWER_TOP} == NEWER_TOP
    assert after["retention"]["max_cold_bytes"] == 5
    full, _ = LogManager(store).read("keep")
    marked = [lg for lg in full.ledgers if lg.extra]
    assert [(lg.ledger_id, dict(lg.extra)) for lg in marked] == [
        (LedgerId(0, 100 + segs.SEGMENT_LEDGERS + 1), {"offloaded": json.dumps({"files": 2})})]


def test_a_sealed_ledger_carries_its_seal_time_once() -> None:
    rec = LogRecord("s").with_ledger(LedgerId(0, 1), ctime_ms=10)
    assert rec.ledgers[0].sealed_ms is None
    sealed = rec.with_sealed(LedgerId(0, 1), 4, 40, sealed_ms=500)
    assert sealed.ledgers[0].sealed_ms == 500
    # Sealing again (a takeover re-reading it) keeps the first seal time.
    assert sealed.with_sealed(LedgerId(0, 1), 4, 40, sealed_ms=900).ledgers[0].sealed_ms == 500
    appended = LogRecord("a").with_ledgers_appended([LedgerId(0, 2)], [(1, 1)])
    assert appended.ledgers[0].sealed_ms == appended.ledgers[0].ctime_ms


def test_the_message_format_is_said_twice_and_either_copy_counts() -> None:
    rec = LogRecord("m").with_message_format(MESSAGE_FORMAT_BATCHED)
    body = log_record.to_json_dict(rec)
    assert body["properties"][log_record.MESSAGE_FORMAT_PROPERTY] == MESSAGE_FORMAT_BATCHED
    del body["messageFormat"]  # what a release before the field writes back
    assert log_record.from_json_dict(body).message_format == MESSAGE_FORMAT_BATCHED


def test_log_settings_are_checked_when_set_and_kept_when_unknown() -> None:
    rec = log_settings.with_settings(LogRecord("st"), {"backlog_policy": "trim", "backlog_quota_bytes": "1000"})
    assert log_settings.get(rec, "backlog_policy") == "trim"
    assert log_settings.get(rec, "backlog_quota_bytes") == 1000
    assert log_settings.get(rec, "rollover_max_bytes") == log_settings.LOG_SETTINGS["rollover_max_bytes"].default
    with pytest.raises(InvalidMetadataError, match="backlog_policy='drop'.*keep, trim"):
        log_settings.with_settings(rec, {"backlog_policy": "drop"})
    with pytest.raises(InvalidMetadataError, match="unknown log setting 'rollover_max_byte'"):
        log_settings.with_settings(rec, {"rollover_max_byte": "1"})
    # A setting a newer release stored survives this release's changes, and shows.
    body = log_record.to_json_dict(rec)
    body["properties"]["setting.tier_store"] = "s3://x"
    newer = log_record.from_json_dict(body)
    unset = log_settings.with_settings(newer, {"backlog_quota_bytes": None})
    assert log_settings.stored(unset) == {"backlog_policy": "trim", "tier_store": "s3://x"}
    # An unparseable stored value reads as the default rather than failing every reader.
    body["properties"]["setting.backlog_quota_bytes"] = "lots"
    assert log_settings.get(log_record.from_json_dict(body), "backlog_quota_bytes") is None
