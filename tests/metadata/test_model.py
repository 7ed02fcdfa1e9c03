"""Ledger ids, the metadata state machine, quorum validation and serialization (pure, no I/O)."""

from __future__ import annotations

import pickle
import random

import pytest

from metadata import (
    CloseContext,
    CloseReason,
    CorruptMetadataError,
    CreateContext,
    DigestType,
    IllegalStateTransitionError,
    InvalidMetadataError,
    InvalidQuorumError,
    LedgerId,
    LedgerMetadata,
    LedgerState,
    QuorumConfig,
    UnsupportedFormatVersionError,
    serde,
    write_set,
)
from metadata.context import Party

U64 = 2**64 - 1
ENSEMBLE = ["b1:3181", "b2:3181", "b3:3181"]


FIRST_LEDGER = LedgerId(0, 1)


def make(lid: LedgerId = FIRST_LEDGER, **kw) -> LedgerMetadata:
    return LedgerMetadata.new(lid, QuorumConfig(3, 3, 2), ENSEMBLE, **kw)


# ---- ids ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("scope,lid", [(0, 0), (0, 1), (1, 0), (U64, U64), (0xDEADBEEF, 42)])
def test_ledger_id_round_trips(scope: int, lid: int) -> None:
    x = LedgerId(scope, lid)
    assert len(x.qualified_name) == 32 and x.qualified_name == x.qualified_name.lower()
    assert LedgerId.from_qualified_name(x.qualified_name) == x
    assert LedgerId.parse(x.qualified_name.upper()) == x
    assert LedgerId.parse((scope, lid)) == x
    assert x.value == (scope << 64) | lid


def test_ledger_id_parse_forms_and_order() -> None:
    assert LedgerId.parse(7) == LedgerId(0, 7) == LedgerId.parse("7")
    ids = [LedgerId(1, 0), LedgerId(0, U64), LedgerId(0, 2), LedgerId(U64, 0)]
    assert sorted(ids) == sorted(ids, key=lambda i: i.value)
    assert sorted(ids)[0] == LedgerId(0, 2)
    for bad in (-1, 2**64, "xyz", "0x12", (1, -1), True, 1.5, "1" * 33):
        with pytest.raises(InvalidMetadataError):
            LedgerId.parse(bad)


def test_random_scoped_ids_are_outside_scope_zero() -> None:
    ids = {LedgerId.random_scoped() for _ in range(1000)}
    assert len(ids) == 1000 and all(i.scope_id != 0 for i in ids)


# ---- quorums ------------------------------------------------------------------------------------

def test_quorum_validation_and_explanation() -> None:
    q = QuorumConfig(5, 3, 2)
    assert (q.replication_quorum, q.recovery_quorum, q.quorum_intersection) == (2, 2, 1)
    assert dict(q.explain())["recovery quorum"].startswith("2")
    for e, w, a in [(2, 3, 2), (3, 2, 3), (3, 3, 0), (0, 0, 0), (3, 3, 4)]:
        with pytest.raises(InvalidQuorumError):
            QuorumConfig(e, w, a)
    assert write_set(0, 4, 3) == [0, 1, 2]
    assert write_set(2, 4, 3) == [2, 3, 0]
    assert write_set(7, 4, 3) == [3, 0, 1]


# ---- state machine ------------------------------------------------------------------------------

def test_legal_transitions() -> None:
    m = make()
    assert m.state is LedgerState.OPEN
    closed = m.close(9, 90)
    assert (closed.state, closed.last_entry_id, closed.length_bytes) == (LedgerState.CLOSED, 9, 90)
    assert closed.seal_time_ms is not None
    rec = m.start_recovery()
    assert rec.state is LedgerState.IN_RECOVERY
    assert rec.start_recovery().state is LedgerState.IN_RECOVERY  # a new recoverer takes over
    assert rec.close(-1, 0).last_entry_id == -1
    changed = m.with_ensemble_change(5, ["b1:3181", "b4:3181", "b3:3181"])
    assert [s.first_entry_id for s in changed.segments] == [0, 5]
    assert changed.ensemble_for(4) == tuple(ENSEMBLE) and changed.ensemble_for(5)[1] == "b4:3181"
    # A second change at the same first entry replaces the fragment (nothing acknowledged in it).
    again = changed.with_ensemble_change(5, ["b1:3181", "b5:3181", "b3:3181"])
    assert len(again.segments) == 2 and again.segments[1].bookies[1] == "b5:3181"
    assert rec.with_ensemble_change(3, ["b4:3181", "b2:3181", "b3:3181"]).state is LedgerState.IN_RECOVERY
    # Closing drops fragments that start after the last entry.
    assert len(changed.close(4, 40).segments) == 1
    assert m is not closed and m.state is LedgerState.OPEN  # immutable


def test_illegal_transitions_raise_named_error() -> None:
    closed = make().close(3, 30)
    for action in (
        closed.start_recovery,
        lambda: closed.close(3, 30),
        closed.reopen,
        lambda: closed.with_ensemble_change(4, ENSEMBLE),
        make().start_recovery().reopen,
        make().reopen,
    ):
        with pytest.raises(IllegalStateTransitionError):
            action()
    with pytest.raises(InvalidMetadataError):
        make().with_ensemble_change(0, ["b1:3181", "b1:3181", "b2:3181"])  # repeated bookie
    with pytest.raises(InvalidMetadataError):
        make().with_ensemble_change(2, ["b1:3181"])  # wrong size
    with pytest.raises(InvalidMetadataError):
        make().with_ensemble_change(5, ENSEMBLE).with_ensemble_change(3, ENSEMBLE)  # goes backwards
    with pytest.raises(TypeError):
        make().custom["k"] = b"v"


# ---- serialization ------------------------------------------------------------------------------

def full_metadata() -> LedgerMetadata:
    lid = LedgerId(U64, U64)
    create = (
        CreateContext.builder()
        .created_by("Company X", "System y", "service.z", "host1")
        .created_on_behalf_of("Tenant", "sys", "svc", "inst")
        .part_of_data_set("persistent://public/default/t")
        .expected_max_open_duration(14400)
        .expected_average_entry_size(1024, 12.5)
        .expected_max_entries(50000)
        .expected_max_length(262144000)
        .expected_average_entry_add_rate_per_second(100)
        .expected_maximum_entry_add_rate_per_second(1000)
        .follows_ledger((U64, U64 - 1))
        .child_of_ledger(LedgerId(3, 4))
        .build()
    )
    close = (
        CloseContext.builder().closing_abnormally("disk on fire").expect_reads_until(2**62).expect_delete_after(2**62 + 1).build()
    )
    m = LedgerMetadata.new(
        lid, QuorumConfig(4, 3, 2), ["a:1", "b:1", "c:1", "d:1"], digest_type="mac", password=b"secret",
        create_context=create, custom={"owner": b"\x00\xff", "empty": b""}, ctime_ms=2**50,
    )
    m = m.with_ensemble_change(2**63 - 10, ["a:1", "e:1", "c:1", "d:1"]).start_recovery()
    return m.close(2**63 - 2, 2**63 - 1, close_context=close, seal_time_ms=2**51)


def test_serialization_round_trips_every_field() -> None:
    m = full_metadata()
    back = serde.decode(serde.encode(m), m.ledger_id)
    assert back == m
    assert back.create_context == m.create_context and back.close_context == m.close_context
    assert back.close_context.reason is CloseReason.ABNORMAL
    assert back.digest_type is DigestType.MAC and back.check_password(b"secret") and not back.check_password(b"x")
    assert b"secret" not in serde.encode(m)  # only a digest of the password is stored
    minimal = make(ctime_ms=1)
    assert serde.decode(serde.encode(minimal)) == minimal
    assert pickle.loads(pickle.dumps(m)) == m
    js = serde.to_json_dict(m)
    assert js["ledger"]["qualified_name"] == "f" * 32 and js["createContext"]["createdBy"]["enterprise"] == "Company X"
    assert js["closeContext"]["reason"] == "ABNORMAL" and "secret" not in str(js)


def test_every_truncation_and_byte_flip_is_a_clear_error() -> None:
    m = full_metadata()
    data = serde.encode(m)
    for n in range(len(data)):
        with pytest.raises(CorruptMetadataError, match=str(m.ledger_id)):
            serde.decode(data[:n], m.ledger_id)
    rng = random.Random(1234)
    for i in range(len(data)):
        flipped = bytearray(data)
        flipped[i] ^= 1 << rng.randrange(8)
        with pytest.raises((CorruptMetadataError, UnsupportedFormatVersionError), match=str(m.ledger_id)):
            serde.decode(bytes(flipped), m.ledger_id)


def test_newer_format_version_is_refused_by_name() -> None:
    data = bytearray(serde.encode(make()))
    data[4:6] = (99).to_bytes(2, "big")
    with pytest.raises(UnsupportedFormatVersionError, match="ledger 1.*version 99"):
        serde.decode(bytes(data), LedgerId(0, 1))


def test_bp44_builders_validate() -> None:
    with pytest.raises(InvalidMetadataError):
        CreateContext.builder().part_of_data_set("x" * 257).build()
    with pytest.raises(InvalidMetadataError):
        Party("e" * 300)
    with pytest.raises(InvalidMetadataError):
        CreateContext.builder().expected_max_entries(-1).build()
    ctx = CloseContext.builder().because_inactive().build()
    assert ctx.reason is CloseReason.INACTIVE
