"""Log writers under injected metadata faults: a seal that fails during rollover, and a compare-and-set
adding a ledger to the log whose outcome is unknown. Real bookies; faults injected into this test's
own client (its LedgerManager / LogManager instances), never into product code."""

from __future__ import annotations

from typing import Any

import pytest

from metadata import LedgerId, LedgerMetadata, LedgerState, MetadataError, MetadataUnavailableError, NoSuchLedgerError
from metadata.errors import OutcomeUnknownError
from metadata.log_record import LogRecord
from pyspark_ledger.client import LedgerClient
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.log import LogWriter, LogWriterStoppedError

ENTRIES = 20
ROLLOVER_ENTRIES = 5


class CloseGate:
    """Fails the metadata compare-and-set that CLOSES one chosen ledger (a writer's seal and a
    recovery's close alike) as if the metadata service were unreachable, `failures` times."""

    def __init__(self, client: LedgerClient, failures: int):
        self.real = client.ledgers.compare_and_set
        self.target: LedgerId | None = None
        self.failures_left = failures
        self.failed = 0

    def __call__(self, meta: LedgerMetadata, expected_version: int) -> int:
        if meta.ledger_id == self.target and meta.state is LedgerState.CLOSED and self.failures_left > 0:
            self.failures_left -= 1
            self.failed += 1
            raise MetadataUnavailableError(f"injected: metadata service unreachable while closing {meta.ledger_id}")
        return self.real(meta, expected_version)


class UnknownOutcomeAdd:
    """The next compare-and-set of the log record that adds a ledger (next_seq grows) raises
    OutcomeUnknownError, after applying it if `applied`. With `reread_fails`, the next read of
    the log record after that fails too."""

    def __init__(self, client: LedgerClient, name: str, *, applied: bool, reread_fails: bool = False):
        self.logs = client.logs
        # The writer commits and re-reads on the head view (LogManager.update_head, read_tail).
        self.real_cas, self.real_read = client.logs.compare_and_set_head, client.logs.read_tail
        self.name, self.applied, self.reread_fails = name, applied, reread_fails
        self.armed_below_seq: int | None = None
        self.fired: list[LedgerId] = []
        self.read_failures = 0

    def arm(self) -> None:
        got = self.logs.get(self.name)
        self.armed_below_seq = 0 if got is None else got[0].next_seq

    def cas(self, record: LogRecord, expected_version: int, **kw: Any) -> int:
        if self.armed_below_seq is not None and record.next_seq > self.armed_below_seq:
            self.armed_below_seq = None
            self.fired.append(record.ledgers[-1].ledger_id)
            if self.applied:
                self.real_cas(record, expected_version, **kw)
            raise OutcomeUnknownError("injected: connection lost while the log record's update was in flight")
        return self.real_cas(record, expected_version, **kw)

    def read(self, name: str) -> tuple[LogRecord, int]:
        if self.reread_fails and self.fired and self.read_failures == 0:
            self.read_failures += 1
            raise MetadataUnavailableError("injected: metadata service unreachable while re-reading the log")
        return self.real_read(name)


def install(monkeypatch: pytest.MonkeyPatch, client: LedgerClient, gate: CloseGate | UnknownOutcomeAdd) -> None:
    if isinstance(gate, CloseGate):
        monkeypatch.setattr(client.ledgers, "compare_and_set", gate)
    else:
        monkeypatch.setattr(client.logs, "compare_and_set_head", gate.cas)
        monkeypatch.setattr(client.logs, "read_tail", gate.read)


def append_all(w: LogWriter, count: int, prefix: bytes) -> tuple[list[bytes], list[Exception]]:
    """Append `count` entries, carrying on past failures; returns (acknowledged, errors)."""
    acked: list[bytes] = []
    errors: list[Exception] = []
    for i in range(count):
        payload = prefix + b"-%d" % i
        try:
            w.append(payload, timeout_s=60)
            acked.append(payload)
        except (LedgerError, MetadataError) as exc:
            errors.append(exc)
    return acked, errors


def assert_log_whole(client: LedgerClient, name: str, acked: list[bytes], writing_ledger: LedgerId | None = None) -> None:
    """Every ledger of the log exists and, except the one a live writer is writing, is CLOSED with
    its end recorded in the log. Once no writer is writing: every acknowledged entry reads back,
    in order, once (while one writes, its last entry may still be past the LAC)."""
    rec = client.describe_log(name)
    for lg in rec.ledgers:
        try:
            meta = client.ledger_metadata(lg.ledger_id)
        except NoSuchLedgerError:
            pytest.fail(f"the log references ledger {lg.ledger_id} (seq {lg.seq}), which was deleted")
        if lg.ledger_id == writing_ledger:
            continue
        assert meta.state is LedgerState.CLOSED, (
            f"ledger {lg.ledger_id} (seq {lg.seq} of {len(rec.ledgers)}) is {meta.state.value} with no writer")
        assert lg.entry_count == meta.last_entry_id + 1, f"the log does not record ledger {lg.ledger_id}'s end"
    if writing_ledger is not None:
        return
    content = [e.payload for e in client.open_log_reader(name).read()]
    assert len(content) == len(set(content)), "an entry appears twice"
    where = {p: i for i, p in enumerate(content)}
    missing = [p for p in acked if p not in where]
    assert not missing, f"acknowledged entries missing from the log: {missing[:5]}"
    assert [where[p] for p in acked] == sorted(where[p] for p in acked), "acknowledged entries out of order"


def reopen_and_close(client: LedgerClient, name: str) -> None:
    """A new writer takes the log over (recovering what the last one left open) and closes."""
    client.open_log_writer(name).close()


# ---- a seal that fails during rollover ------------------------------------------------------------


def test_failed_seal_at_rollover_is_recovered_and_the_writer_carries_on(
        client: LedgerClient, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = CloseGate(client, failures=1)  # the writer's own close fails; its recovery's close works
    install(monkeypatch, client, gate)
    w = client.open_log_writer("sealfail", rollover_entries=ROLLOVER_ENTRIES)
    gate.target = w.current_ledger
    acked, errors = append_all(w, ENTRIES, b"s")
    assert gate.failed == 1, "the injected close failure did not happen"
    assert_log_whole(client, "sealfail", acked, writing_ledger=w.current_ledger)
    assert not errors, f"appends failed although the rolled-over ledger could be recovered: {errors[:3]}"
    assert len(client.describe_log("sealfail").ledgers) == ENTRIES // ROLLOVER_ENTRIES
    w.close()
    reopen_and_close(client, "sealfail")
    assert_log_whole(client, "sealfail", acked)


def test_unrecoverable_seal_at_rollover_stops_the_writer_and_the_next_writer_recovers_it(
        client: LedgerClient, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = CloseGate(client, failures=1_000)  # the close and every recovery's close fail
    install(monkeypatch, client, gate)
    w = client.open_log_writer("sealstuck", rollover_entries=ROLLOVER_ENTRIES)
    stuck = w.current_ledger
    gate.target = stuck
    acked, errors = append_all(w, ENTRIES, b"s")
    assert gate.failed >= 1, "the injected close failure did not happen"
    gate.failures_left = 0  # the metadata service is back
    w.close()
    reopen_and_close(client, "sealstuck")
    assert_log_whole(client, "sealstuck", acked)
    # Nothing carried on past the ledger left unsealed: the writer stopped, with a clear error.
    assert errors and all(isinstance(e, LogWriterStoppedError) for e in errors), errors[:3]
    assert "could not be sealed" in str(errors[0]) and str(stuck) in str(errors[0])
    assert len(acked) == ROLLOVER_ENTRIES


# ---- a compare-and-set adding a ledger whose outcome is unknown ----------------------------------


def test_unknown_outcome_add_at_rollover_that_applied_keeps_the_ledger(
        client: LedgerClient, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = UnknownOutcomeAdd(client, "unknown", applied=True)
    install(monkeypatch, client, gate)
    w = client.open_log_writer("unknown", rollover_entries=ROLLOVER_ENTRIES)
    acked, errors = append_all(w, ROLLOVER_ENTRIES, b"a")
    gate.arm()
    more, more_errors = append_all(w, ROLLOVER_ENTRIES, b"b")
    assert len(gate.fired) == 1, "the injected unknown outcome did not happen"
    acked += more
    assert_log_whole(client, "unknown", acked, writing_ledger=w.current_ledger)
    assert w.current_ledger == gate.fired[0], "the writer did not adopt the ledger the log records"
    assert not errors + more_errors, (errors + more_errors)[:3]
    w.close()
    reopen_and_close(client, "unknown")
    assert_log_whole(client, "unknown", acked)


def test_unknown_outcome_add_at_open_that_applied_keeps_the_ledger(
        client: LedgerClient, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = UnknownOutcomeAdd(client, "unknownopen", applied=True)
    install(monkeypatch, client, gate)
    w = client.open_log_writer("unknownopen")
    acked, _ = append_all(w, 3, b"a")
    gate.arm()
    try:
        w2 = client.open_log_writer("unknownopen")
    except (LedgerError, MetadataError):
        w2 = None
    assert len(gate.fired) == 1
    assert_log_whole(client, "unknownopen", acked, writing_ledger=gate.fired[0])
    assert w2 is not None and w2.current_ledger == gate.fired[0]
    more, errors = append_all(w2, 3, b"b")
    assert not errors
    w2.close()
    reopen_and_close(client, "unknownopen")
    assert_log_whole(client, "unknownopen", acked + more)


def test_unknown_outcome_add_that_did_not_apply_deletes_the_ledger(
        client: LedgerClient, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = UnknownOutcomeAdd(client, "notapplied", applied=False)
    install(monkeypatch, client, gate)
    w = client.open_log_writer("notapplied", rollover_entries=ROLLOVER_ENTRIES)
    acked, _ = append_all(w, ROLLOVER_ENTRIES, b"a")
    gate.arm()
    more, errors = append_all(w, ROLLOVER_ENTRIES, b"b")
    assert len(gate.fired) == 1 and len(errors) == 1 and isinstance(errors[0], OutcomeUnknownError)
    w.close()
    assert gate.fired[0] not in set(client.list_ledgers()), "a ledger the log never referenced was leaked"
    assert set(client.list_ledgers()) == {lg.ledger_id for lg in client.describe_log("notapplied").ledgers}
    assert_log_whole(client, "notapplied", acked + more)


def test_unknown_outcome_add_with_an_unreadable_log_keeps_the_ledger_and_stops(
        client: LedgerClient, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = UnknownOutcomeAdd(client, "unreadable", applied=True, reread_fails=True)
    install(monkeypatch, client, gate)
    w = client.open_log_writer("unreadable", rollover_entries=ROLLOVER_ENTRIES)
    acked, _ = append_all(w, ROLLOVER_ENTRIES, b"a")
    gate.arm()
    more, errors = append_all(w, ROLLOVER_ENTRIES, b"b")
    assert len(gate.fired) == 1 and gate.read_failures == 1
    assert errors and all(isinstance(e, LogWriterStoppedError) for e in errors), errors[:3]
    assert not more
    w.close()
    reopen_and_close(client, "unreadable")
    assert_log_whole(client, "unreadable", acked)
