"""The producer's fast paths for headers (log/batching.py, protocol/message_batch.py): equal
headers of consecutive messages are checked once, and a batch whose messages all have the first
one's headers is encoded from that one's columns repeated. Either way the batch's bytes, its size
accounting and the errors for bad headers are what the full path gives."""

from __future__ import annotations

import random

import pytest

from pyspark_ledger.log.batching import OpenBatch
from pyspark_ledger.protocol.message_batch import HEADER_VALUE_BYTES_MAX, MessageBoundError, decode_batch, encode_batch

T = 1_700_000_000_000


def fill(messages: list[tuple[int | None, list[tuple[str, bytes]] | None]]) -> OpenBatch:
    b = OpenBatch(0.0)
    for k, (event, headers) in enumerate(messages):
        b.add(b"m%d" % k, None, event, headers)
    return b


def slow_encode(b: OpenBatch) -> bytes:
    """The batch as encode_batch's general path makes it (every message's headers checked)."""
    return encode_batch(b.payloads, [T] * len(b.payloads), event_ms=b.event_ms, headers=b.headers)


@pytest.mark.parametrize("seed", range(40))
def test_fast_paths_make_the_same_bytes_and_sizes_as_the_general_one(seed: int) -> None:
    rng = random.Random(seed)
    constant = [("trace", b"0123456789abcdef"), ("dup", b"x"), ("dup", b"y")]
    messages: list[tuple[int | None, list[tuple[str, bytes]] | None]] = []
    for _ in range(rng.choice((1, 2, 50, 70, 300))):
        kind = rng.random()
        headers = constant if kind < 0.8 or seed % 4 == 0 else \
            (None if kind < 0.9 else [("trace", b"%d" % rng.randrange(100)), ("ké", bytearray(b"v"))])
        messages.append((T + rng.randrange(1000) if rng.random() < 0.5 else None, headers))
    b = fill(messages)
    data = b.encode(T)
    assert data == slow_encode(b)
    # Mutable pairs take the full path at every message: the same sizes, the same bytes.
    full = fill([(e, None if h is None else [list(p) for p in h]) for e, h in messages])  # type: ignore[misc]  # list pairs on purpose
    assert b.size_bytes == full.size_bytes and data == full.encode(T)
    got = decode_batch(data)
    for k, (_, headers) in enumerate(messages):
        assert [(key, bytes(v)) for key, v in got.headers(k)] == [(key, bytes(v)) for key, v in headers or ()]


def test_a_header_over_its_bound_is_refused_even_after_equal_keys_passed() -> None:
    b = fill([(None, [("trace", b"ok")])] * 3)
    with pytest.raises(MessageBoundError, match="HEADER_VALUE_BYTES_MAX"):
        b.add(b"big", None, None, [("trace", b"v" * (HEADER_VALUE_BYTES_MAX + 1))])
    pair = ["trace", b"ok"]  # a mutable pair: checked every time, never taken as equal to a checked one
    b.add(b"list", None, None, [pair])  # type: ignore[list-item]  # a list pair on purpose
    pair[1] = b"v" * (HEADER_VALUE_BYTES_MAX + 1)
    with pytest.raises(MessageBoundError, match="HEADER_VALUE_BYTES_MAX"):
        b.add(b"list again", None, None, [pair])  # type: ignore[list-item]  # a list pair on purpose
    assert len(b.payloads) == 4 and decode_batch(b.encode(T)).count == 4


def test_a_message_refused_after_its_headers_were_checked_leaves_the_batch_exact() -> None:
    b = fill([(None, [("a", b"1")])])
    with pytest.raises(MessageBoundError):
        b.add(b"bad key", b"k" * 70_000, None, [("b", b"2")])  # headers checked and kept, then the key refused
    b.add(b"next", None, None, [("b", b"2")])
    assert b.encode(T) == slow_encode(b)
    assert decode_batch(b.encode(T)).headers(1) == [("b", b"2")]


def test_the_same_list_changed_between_appends_is_checked_again() -> None:
    given = [("trace", b"ok")]
    b = fill([(None, given), (None, given)])
    given[0] = ("trace", b"v" * (HEADER_VALUE_BYTES_MAX + 1))  # the producer reuses its list
    with pytest.raises(MessageBoundError, match="HEADER_VALUE_BYTES_MAX"):
        b.add(b"big", None, None, given)
    given[0] = ("trace", b"other")
    b.add(b"other", None, None, given)
    got = decode_batch(b.encode(T))
    assert [got.headers(i) for i in range(3)] == [[("trace", b"ok")]] * 2 + [[("trace", b"other")]]
