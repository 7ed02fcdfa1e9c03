"""minEntriesPerTrigger / maxTriggerDelay (datasource/stream/trigger_gate.py), without a JVM: on a
fake clock, over seeded runs of Spark's latestOffset calls, the gate never admits a micro-batch of
fewer than minEntriesPerTrigger entries before maxTriggerDelay has passed since the last one, and
it does admit once either holds (so a slow producer's entries still arrive within the delay).
A planted gate that forgets the delay's restart is caught by the same check. The options parse
with errors naming them."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from pyspark_ledger.datasource.errors import OptionError
from pyspark_ledger.datasource.stream.sink import StreamSettings, parse_stream_options
from pyspark_ledger.datasource.stream.trigger_gate import TriggerDelay, TriggerGate, duration_ms

SEEDS = 500
MIN_ENTRIES, DELAY_MS = 1000, 5000


class FakeClock:
    def __init__(self) -> None:
        self.ms = 1_000_000.0

    def __call__(self) -> float:
        return self.ms


def run(seed: int, make: Callable[[TriggerDelay, FakeClock], TriggerGate]) -> None:
    """A producer writes at a seeded rate; Spark asks at seeded intervals; an admitted batch
    takes everything readable. Checks safety (no small batch early) and liveness (no hold past
    the delay, nor with enough entries)."""
    rng = random.Random(seed)
    clock = FakeClock()
    gate = make(TriggerDelay(MIN_ENTRIES, DELAY_MS), clock)
    readable = 0
    last_batch_ms: float | None = None  # the delay runs from the first decision
    rate_per_ms = rng.choice((0.0, 0.01, 0.1, 0.5, 5.0))
    for _ in range(400):
        step = rng.choice((1, 10, 100, 500, 2000))
        clock.ms += step
        readable += int(step * rate_per_ms) + (rng.random() < 0.05) * rng.randrange(1, 2000)
        admitted = gate.admit(readable)
        last_batch_ms = clock.ms if last_batch_ms is None else last_batch_ms
        waited = clock.ms - last_batch_ms
        if admitted:
            assert readable >= 1, f"seed {seed}: an empty micro-batch"
            assert readable >= MIN_ENTRIES or waited >= DELAY_MS, \
                f"seed {seed}: admitted {readable} < {MIN_ENTRIES} entries after {waited} ms < {DELAY_MS}"
            readable, last_batch_ms = 0, clock.ms
        else:
            assert readable < MIN_ENTRIES and (readable == 0 or waited < DELAY_MS), \
                f"seed {seed}: held back {readable} entries after {waited} ms"


@pytest.mark.parametrize("block", range(2))
def test_never_fewer_than_min_entries_before_the_delay(block: int) -> None:
    for seed in range(block * SEEDS // 2, (block + 1) * SEEDS // 2):
        run(seed, TriggerGate)


def test_a_gate_that_never_restarts_its_delay_is_caught() -> None:
    class Forgetful(TriggerGate):  # planted bug: the delay counts from the query's start only
        def admit(self, available_entries: int) -> bool:
            since = self._since_ms
            ok = super().admit(available_entries)
            if ok and since is not None:
                self._since_ms = since
            return ok

    caught = 0
    for seed in range(SEEDS):
        try:
            run(seed, Forgetful)
        except AssertionError:
            caught += 1
    assert caught > SEEDS // 10


def test_the_delay_passes_even_without_new_entries_then_one_entry_goes() -> None:
    clock = FakeClock()
    gate = TriggerGate(TriggerDelay(1000, 5000), clock)
    assert not gate.admit(0)
    clock.ms += 6000
    assert not gate.admit(0)  # nothing to read: no batch
    assert gate.admit(1)  # the delay has passed: one entry is a batch
    assert not gate.admit(999)  # the delay restarted
    assert gate.admit(1000)


def test_options() -> None:
    base = {"metadataServiceUri": "sqlite:///x.db", "log": "a"}
    _, s = parse_stream_options({**base, "minEntriesPerTrigger": "1000", "maxTriggerDelay": "5s"})
    assert s.trigger_delay == TriggerDelay(1000, 5000)
    _, s = parse_stream_options({**base, "minentriespertrigger": "10"})
    assert s.trigger_delay == TriggerDelay(10, 15 * 60 * 1000)  # Kafka's default delay
    assert parse_stream_options({**base, "maxTriggerDelay": "5s"})[1] == StreamSettings()  # alone: nothing
    assert [duration_ms("d", t) for t in ("500ms", "2.5s", "15m", "1h", "250")] == [500, 2500, 900_000, 3_600_000, 250]
    with pytest.raises(OptionError, match='"maxTriggerDelay": expected a duration'):
        parse_stream_options({**base, "minEntriesPerTrigger": "5", "maxTriggerDelay": "soon"})
    with pytest.raises(OptionError, match='"minEntriesPerTrigger": 50 is more than maxEntriesPerTrigger'):
        parse_stream_options({**base, "minEntriesPerTrigger": "50", "maxEntriesPerTrigger": "10"})
    with pytest.raises(OptionError, match="minEntriesPerTrigger"):
        parse_stream_options({**base, "minEntriesPerTrigger": "0"})
