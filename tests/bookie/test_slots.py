"""KeyedSlots (bookie/slots.py): the bound in all and the bound per key, refused at once with a
reason, and a slot taken again once released."""

from __future__ import annotations

import pytest

from bookie.slots import KeyedSlots
from bookie.storage.errors import InvariantError


def test_per_key_and_total_bounds_refuse_at_once_and_free_on_release() -> None:
    slots = KeyedSlots(total_max=5, per_key_max=2, what="long polls")
    assert [slots.try_take("a") for _ in range(2)] == [None, None]
    assert slots.try_take("a") == "at the limit of 2 long polls per client (a)"
    assert [slots.try_take(k) for k in ("b", "b", "c")] == [None, None, None]
    assert slots.try_take("d") == "at the limit of 5 long polls on this bookie"
    assert (slots.total(), slots.held_by("a"), slots.held_by("d")) == (5, 2, 0)
    slots.release("a")
    assert slots.try_take("d") is None
    assert slots.try_take("a") == "at the limit of 5 long polls on this bookie"
    for key in ("a", "b", "b", "c", "d"):
        slots.release(key)
    assert slots.total() == 0 and slots.held_by("b") == 0


def test_a_release_without_a_take_is_a_bug() -> None:
    slots = KeyedSlots(total_max=1, per_key_max=1, what="connections")
    with pytest.raises(InvariantError):
        slots.release("nobody")


def test_zero_bounds_refuse_everything() -> None:
    assert KeyedSlots(0, 0, "long polls").try_take("a") == "at the limit of 0 long polls on this bookie"
