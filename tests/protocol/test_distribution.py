"""The distribution schedule and quorum checks, exhaustively over small ensembles."""

from __future__ import annotations

import itertools

import pytest

from pyspark_ledger.protocol.distribution import (
    ack_quorum_reachable,
    byte_bounded_chunks,
    covers_every_write_set,
    entry_absent,
    write_set_of,
    write_sets,
)

ENSEMBLE = ("b0", "b1", "b2", "b3", "b4")


def quorums():
    for e in range(1, 6):
        for w in range(1, e + 1):
            for a in range(1, w + 1):
                yield e, w, a


def test_entry_e_goes_to_w_bookies_from_e_mod_e() -> None:
    assert write_set_of(0, ENSEMBLE[:3], 2) == ("b0", "b1")
    assert write_set_of(2, ENSEMBLE[:3], 2) == ("b2", "b0")
    assert write_set_of(7, ENSEMBLE, 3) == ("b2", "b3", "b4")
    assert write_sets(ENSEMBLE[:3], 3) == (("b0", "b1", "b2"), ("b1", "b2", "b0"), ("b2", "b0", "b1"))


@pytest.mark.parametrize("e,w,a", list(quorums()))
def test_any_recovery_quorum_meets_any_ack_quorum(e: int, w: int, a: int) -> None:
    """The reason recovery may trust a negative: for every write set, every set of bookies that
    satisfies `entry_absent` intersects every set of A acks."""
    ensemble = ENSEMBLE[:e]
    for members in write_sets(ensemble, w):
        for acked in itertools.combinations(members, a):
            for k in range(len(members) + 1):
                for absent in itertools.combinations(members, k):
                    if entry_absent(members, w, a, absent):
                        assert set(absent) & set(acked), (members, acked, absent)


@pytest.mark.parametrize("e,w,a", list(quorums()))
def test_fencing_coverage_blocks_every_ack_quorum(e: int, w: int, a: int) -> None:
    """Once fencing is answered by a covering set, no write set has A unfenced bookies left."""
    ensemble = ENSEMBLE[:e]
    for k in range(e + 1):
        for fenced in itertools.combinations(ensemble, k):
            if covers_every_write_set(ensemble, w, a, fenced):
                assert not ack_quorum_reachable(ensemble, w, a, dead=fenced)
                for members in write_sets(ensemble, w):
                    assert sum(1 for b in members if b not in fenced) < a


def test_ack_quorum_reachable_counts_per_write_set() -> None:
    assert ack_quorum_reachable(ENSEMBLE[:3], 3, 2, {"b1"})
    assert not ack_quorum_reachable(ENSEMBLE[:3], 3, 2, {"b1", "b2"})
    assert not ack_quorum_reachable(ENSEMBLE[:3], 2, 2, {"b1"})  # write set (b0, b1) loses its quorum


def test_chunks_bounded_in_entries_and_bytes_keep_order() -> None:
    sizes = [5, 5, 5, 20, 1, 1, 1, 1]
    chunks = list(byte_bounded_chunks(sizes, lambda x: x, 3, 10))
    assert chunks == [[5, 5], [5], [20], [1, 1, 1], [1]]
    assert [x for c in chunks for x in c] == sizes
    assert list(byte_bounded_chunks([], lambda x: x, 3, 10)) == []
    with pytest.raises(ValueError, match="positive"):
        list(byte_bounded_chunks([1], lambda x: x, 0, 10))
