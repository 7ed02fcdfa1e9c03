"""The producer's fast paths for stamps (log/batching.py, protocol/message_batch.encode_columns):
a message whose one header has the batch's one key takes its value without the full check (the
very pair of the message before, without any check), event times near the batch's first become
4-byte offsets, and the batch is encoded in the short layout (one append time, shared header keys,
shared headers). Whatever path a message takes, the batch reads back exactly what was given, its
size accounting is exact (or above, by what shared headers save), and a bad header is refused by
name before anything of its message is added."""

from __future__ import annotations

import random
from typing import Any

import pytest

from pyspark_ledger.log.batching import OpenBatch
from pyspark_ledger.protocol import message_batch as mb
from pyspark_ledger.protocol.message_batch import HEADER_VALUE_BYTES_MAX, MessageBoundError, decode_batch, encode_batch

T = 1_700_000_000_000
Message = tuple[bytes | None, int | None, list[tuple[str, bytes]] | None]


def fill(messages: list[Message]) -> OpenBatch:
    b = OpenBatch(0.0)
    for k, (key, event, headers) in enumerate(messages):
        b.add(b"m%d" % k, key, event, headers)
    return b


def assert_reads_back(b: OpenBatch, messages: list[Message]) -> int:
    """The batch's bytes give every message back; returns its layout flags."""
    data = b.encode(T)
    got = decode_batch(data)
    assert got.count == len(messages)
    for i, (key, event, headers) in enumerate(messages):
        assert got.payload(i) == b"m%d" % i and int(got.append_ms[i]) == T
        assert got.key(i) == key and got.event_time_ms(i) == event
        assert got.headers(i) == [(k, bytes(v)) for k, v in headers or ()], f"message {i}"
    flags = data[4]
    # The byte bound counts every byte; only headers shared by every message (stored once) and the
    # event time of a batch of one (no offset) cost less than counted.
    assert len(data) <= b.size_bytes
    if not flags & mb.SHARED_HEADERS and not (len(messages) == 1 and flags & mb.EVENT_TIMES):
        assert len(data) == b.size_bytes
    plain = encode_batch([b"m%d" % i for i in range(len(messages))], [T] * len(messages),
                         keys=[k for k, _, _ in messages] if any(k is not None for k, _, _ in messages) else None,
                         event_ms=[mb.NO_TIME if e is None else e for _, e, _ in messages]
                         if any(e is not None for _, e, _ in messages) else None,
                         headers=[[(k, bytes(v)) for k, v in h or ()] for _, _, h in messages]
                         if any(h for _, _, h in messages) else None)
    assert len(data) <= len(plain)  # never longer than the plain layout of the same messages
    return flags


@pytest.mark.parametrize("seed", range(40))
def test_every_path_reads_back_what_was_given_with_exact_sizes(seed: int) -> None:
    print("seed", seed)
    rng = random.Random(seed)
    constant = [("trace", b"0123456789abcdef")]
    several = [("trace", b"0123456789abcdef"), ("dup", b"x"), ("dup", b"y")]
    shape = rng.choice(("constant", "several", "value each", "mixed"))
    spread = rng.choice((0, 1_000, mb.OFFSET_MAX, 2**40))  # 2**40: too far for offsets
    messages: list[Message] = []
    for i in range(rng.choice((1, 2, 50, 70, 300))):
        kind = rng.random()
        headers: Any = {
            "constant": constant, "several": several, "value each": [("trace", b"%d" % rng.randrange(10**6))],
        }.get(shape) or rng.choice([constant, several, None, [("trace", b"%d" % i)],
                                    [("ké", bytearray(b"v"))], [["trace", b"list pair"]]])  # bytearray, list pair: on purpose
        event = None if kind < 0.2 else T + rng.randint(-spread, spread)
        key = rng.choice((None, b"", b"k%d" % i)) if seed % 3 == 0 else None
        messages.append((key, event, headers))
    flags = assert_reads_back(fill(messages), messages)
    assert flags & mb.ONE_APPEND_TIME
    if shape == "constant":
        assert flags & mb.SHARED_HEADERS
    if shape == "value each" and len(messages) > 1:
        assert flags & mb.SHARED_HEADER_KEYS and not flags & mb.SHARED_HEADERS
    if spread <= mb.OFFSET_MAX // 2 and len(messages) > 1 and any(e is not None for _, e, _ in messages):
        assert flags & mb.EVENT_TIME_OFFSETS


def test_event_times_turn_to_full_width_once_one_lies_too_far() -> None:
    messages: list[Message] = [(None, T, None), (None, None, None), (None, T + mb.OFFSET_MAX, None),
                               (None, T - mb.OFFSET_MAX - 1, None), (None, T, None), (None, None, None)]
    for n in range(1, len(messages) + 1):
        flags = assert_reads_back(fill(messages[:n]), messages[:n])
        assert bool(flags & mb.EVENT_TIME_OFFSETS) == (1 < n < 4), n
    edge: list[Message] = [(None, mb.TIME_MS_MAX, None), (None, mb.NO_TIME + 1, None)]
    assert_reads_back(fill(edge), edge)


def test_a_header_over_its_bound_is_refused_even_after_equal_keys_passed() -> None:
    b = fill([(None, None, [("trace", b"ok")])] * 3)
    with pytest.raises(MessageBoundError, match="HEADER_VALUE_BYTES_MAX"):
        b.add(b"big", None, None, [("trace", b"v" * (HEADER_VALUE_BYTES_MAX + 1))])
    pair = ["trace", b"ok"]  # a mutable pair: read at its append, never kept
    b.add(b"list", None, None, [pair])  # type: ignore[list-item]  # a list pair on purpose
    pair[1] = b"v" * (HEADER_VALUE_BYTES_MAX + 1)
    with pytest.raises(MessageBoundError, match="HEADER_VALUE_BYTES_MAX"):
        b.add(b"list again", None, None, [pair])  # type: ignore[list-item]  # a list pair on purpose
    with pytest.raises(MessageBoundError, match=r"\(str, bytes\) pair"):
        b.add(b"not a pair", None, None, [("trace", b"v", b"w")])  # type: ignore[list-item]  # on purpose
    with pytest.raises(MessageBoundError, match=r"\(str, bytes\) pair"):
        b.add(b"not a str", None, None, [(b"trace", b"v")])  # type: ignore[list-item]  # on purpose
    assert len(b.payloads) == 4 and decode_batch(b.encode(T)).headers(3) == [("trace", b"ok")]


def test_a_refused_message_leaves_the_batch_exact() -> None:
    b = fill([(None, T, [("a", b"1")])])
    with pytest.raises(MessageBoundError):
        b.add(b"bad key", b"k" * 70_000, T, [("b", b"2")])  # headers and time fine, the key refused
    with pytest.raises(MessageBoundError, match="event time"):
        b.add(b"bad time", None, mb.NO_TIME, [("a", b"2")])
    with pytest.raises(MessageBoundError):
        b.add(b"bad header", None, T + 2**40, [("a", b"v" * (HEADER_VALUE_BYTES_MAX + 1))])
    messages: list[Message] = [(None, T, [("a", b"1")]), (None, None, [("b", b"2")])]
    b.add(b"m1", None, None, [("b", b"2")])
    assert b.event_ms == [T, mb.NO_TIME]
    assert_reads_back(b, messages)


def test_values_changed_after_append_do_not_change_the_batch() -> None:
    given = [("trace", b"ok")]
    value = bytearray(b"ab")
    b = fill([(None, None, given), (None, None, given), (None, None, [("trace", value)])])  # type: ignore[list-item]  # a bytearray value on purpose
    given[0] = ("trace", b"v" * (HEADER_VALUE_BYTES_MAX + 1))  # the producer reuses its list
    with pytest.raises(MessageBoundError, match="HEADER_VALUE_BYTES_MAX"):
        b.add(b"big", None, None, given)
    value[:] = b"changed"
    given[0] = ("trace", b"other")
    b.add(b"m3", None, None, given)
    want: list[Message] = [(None, None, [("trace", b"ok")]), (None, None, [("trace", b"ok")]),
                           (None, None, [("trace", b"ab")]), (None, None, [("trace", b"other")])]
    assert_reads_back(b, want)


@pytest.mark.parametrize("seed", range(20))
def test_the_same_objects_again_take_the_identity_paths_and_still_count_exactly(seed: int) -> None:
    """A producer's constant header value and event time are the very objects of the batch's first
    message: add() takes them without a check, but an event time too far from the first turns the
    column to full width, and the first time, met again, must count 8 bytes then, not 4."""
    print("seed", seed)
    rng = random.Random(seed)
    value = b"0123456789abcdef"
    far = T + rng.choice((mb.OFFSET_MAX + 1, -2**40))
    messages: list[Message] = []
    for _ in range(rng.choice((2, 3, 40, 200))):
        event = rng.choice((T, T, T, None, far, T + 1)) if seed % 2 else rng.choice((T, T, far))
        headers = None if seed % 4 == 3 else [("trace", rng.choice((value, value, b"%016d" % rng.randrange(10**6))))]
        messages.append((None, event, headers))
    flags = assert_reads_back(fill(messages), messages)
    times = [e for _, e, _ in messages if e is not None]
    near = bool(times) and all(abs(t - times[0]) <= mb.OFFSET_MAX for t in times)
    assert bool(flags & mb.EVENT_TIME_OFFSETS) == (near and len(messages) > 1)


def test_header_values_of_one_length_are_written_with_one_length_until_one_differs() -> None:
    same: list[Message] = [(None, T + i, [("trace", b"%016d" % i)]) for i in range(5)]
    differs: list[Message] = same + [(None, T, [("trace", b"short")]), (None, T, [("trace", b"%016d" % 9)])]
    for messages in (same, differs):
        assert_reads_back(fill(messages), messages)
    b = fill(same)
    with pytest.raises(MessageBoundError, match="HEADER_VALUE_BYTES_MAX"):  # over the bound: refused, not a new length
        b.add(b"big", None, T, [("trace", b"v" * (HEADER_VALUE_BYTES_MAX + 1))])
    assert_reads_back(b, same)


def test_a_wrong_one_length_promise_is_caught_by_the_encoder() -> None:
    """encode_columns trusts header_value_length (OpenBatch keeps it true) but checks the total:
    a caller that breaks the promise fails loudly instead of writing lengths that lie."""
    values = [b"0123456789abcdef", b"short"]
    with pytest.raises(AssertionError, match="not all 16 bytes"):
        mb.encode_columns([b"a", b"b"], T, header_keys=("trace",), header_values=values, header_value_length=16)
    data = mb.encode_columns([b"a", b"b"], T, header_keys=("trace",), header_values=values)
    assert decode_batch(data).headers(1) == [("trace", b"short")]


def test_times_that_are_no_int_take_the_general_path_and_read_back_as_ints() -> None:
    np = pytest.importorskip("numpy")
    messages: list[Message] = [(None, T, [("trace", b"v")]), (None, T + 5, [("trace", b"v")])]
    b = fill(messages)
    b.add(b"m2", None, float(T + 7), [("trace", b"v")])  # type: ignore[arg-type]  # a float on purpose: int() of it
    b.add(b"m3", None, np.int64(T + 8), [("trace", b"v")])  # type: ignore[arg-type]  # a numpy int on purpose
    with pytest.raises(MessageBoundError, match="event time"):
        b.add(b"bad", None, mb.NO_TIME, [("trace", b"v")])
    got = decode_batch(b.encode(T))
    assert [got.event_time_ms(i) for i in range(4)] == [T, T + 5, T + 7, T + 8]
    assert all(type(t) is int for t in b.event_ms or ())


@pytest.mark.parametrize("n", [1, 2, 3, 1000])
def test_a_constant_header_and_time_the_same_objects_every_message_read_back(n: int) -> None:
    """A producer's constant header (one list, one pair) and event time: every message after the
    first is only counted (the columns hold the first's until something differs or the batch is
    encoded), stored as one shared header (bit 6) and zero offsets."""
    headers = [("trace", b"0123456789abcdef")]
    for event in (T, None):
        messages: list[Message] = [(None, event, headers)] * n
        flags = assert_reads_back(fill(messages), messages)
        assert flags & mb.SHARED_HEADERS
        then: list[Message] = messages + [(None, T + 1, headers), (None, event, [("trace", b"x")]), (None, event, headers)]
        assert_reads_back(fill(then), then)
        b = fill(messages)
        with pytest.raises(MessageBoundError, match="KEY_BYTES_MAX"):  # refused after the columns were repeated
            b.add(b"bad", b"k" * (mb.KEY_BYTES_MAX + 1), event, headers)
        b.add(b"m%d" % n, None, event, headers)
        assert_reads_back(b, messages + [(None, event, headers)])
