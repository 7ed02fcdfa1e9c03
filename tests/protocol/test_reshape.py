"""Expand and contract plans (protocol/reshape.py): the new shape, and which copies each entry needs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from metadata import LedgerId, LedgerMetadata, Segment, write_set
from pyspark_ledger.protocol.reshape import ReshapeError, copies_for, plan_reshape


def first_free(ensemble: Sequence[str], candidates: Sequence[str]) -> str:
    return sorted(candidates)[0]


def closed(e: int, w: int, a: int, segments: list[tuple[int, tuple[str, ...]]], last: int = 19) -> LedgerMetadata:
    meta = LedgerMetadata(LedgerId(0, 7), e, w, a, tuple(Segment(f, b) for f, b in segments))
    return meta.close(last, 1000)


def holders(meta_e: int, meta_w: int, ensemble: Sequence[str], entry: int) -> set[str]:
    return {ensemble[s] for s in write_set(entry, meta_e, meta_w)}


def test_expanding_w_adds_exactly_one_copy_per_entry_on_the_same_ensemble() -> None:
    meta = closed(3, 2, 2, [(0, ("a", "b", "c")), (10, ("a", "b", "d"))])
    plan = plan_reshape(meta, ensemble_size=3, write_quorum_size=3, ack_quorum_size=2, remove=(),
                        candidates=["e"], pick=first_free)
    assert plan.ensembles == (("a", "b", "c"), ("a", "b", "d")) and plan.leaving == ()
    for entry in range(20):
        sources, targets = copies_for(meta, plan, entry)
        assert len(targets) == 1 and set(sources) == holders(3, 2, meta.ensemble_for(entry), entry)
        assert set(sources) | set(targets) == set(meta.ensemble_for(entry))


def test_widening_the_ensemble_restripes_and_every_new_holder_gets_a_copy() -> None:
    meta = closed(3, 2, 2, [(0, ("a", "b", "c"))])
    plan = plan_reshape(meta, ensemble_size=4, write_quorum_size=3, ack_quorum_size=2, remove=(),
                        candidates=["d", "e"], pick=first_free)
    assert plan.ensembles == (("a", "b", "c", "d"),)
    after = plan.applied_to(meta)
    for entry in range(20):
        sources, targets = copies_for(meta, plan, entry)
        old = holders(3, 2, meta.ensemble_for(entry), entry)
        new = holders(4, 3, after.ensemble_for(entry), entry)
        assert set(sources) == old and set(targets) == new - old  # after the copies, new ⊆ holders


def test_contracting_removes_a_bookie_from_every_fragment_and_it_leaves() -> None:
    meta = closed(3, 3, 2, [(0, ("a", "b", "c")), (10, ("c", "a", "d"))])
    plan = plan_reshape(meta, ensemble_size=2, write_quorum_size=2, ack_quorum_size=2, remove={"a"},
                        candidates=[], pick=first_free)
    assert plan.ensembles == (("b", "c"), ("c", "d")) and plan.leaving == ("a",)
    for entry in range(20):
        sources, targets = copies_for(meta, plan, entry)
        assert targets == () and sources[-1] == "a"  # W=3 of 3 held everything; the leaving bookie is read last


@pytest.mark.parametrize("kwargs, message", [
    ({"ensemble_size": 3, "write_quorum_size": 2, "ack_quorum_size": 3}, "1 <= A <= W <= E"),
    ({"ensemble_size": 3, "write_quorum_size": 3, "ack_quorum_size": 2, "remove": {"z"}}, "no copies on"),
    ({"ensemble_size": 2, "write_quorum_size": 2, "ack_quorum_size": 2}, "name the bookies to remove"),
    ({"ensemble_size": 5, "write_quorum_size": 3, "ack_quorum_size": 2}, "needs E=5 bookies: it keeps 3 and only 1 other"),
])
def test_impossible_shapes_are_refused_with_the_reason(kwargs: dict[str, Any], message: str) -> None:
    meta = closed(3, 2, 2, [(0, ("a", "b", "c"))])
    with pytest.raises(ReshapeError, match=message):
        plan_reshape(meta, candidates=["d"], pick=first_free, **{"remove": (), **kwargs})


def test_an_open_ledger_is_refused() -> None:
    meta = LedgerMetadata(LedgerId(0, 7), 3, 2, 2, (Segment(0, ("a", "b", "c")),))
    with pytest.raises(ReshapeError, match="only a CLOSED ledger"):
        plan_reshape(meta, ensemble_size=3, write_quorum_size=3, ack_quorum_size=2, remove=(), candidates=[],
                     pick=first_free)
