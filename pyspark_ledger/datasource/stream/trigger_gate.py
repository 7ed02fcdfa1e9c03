"""minEntriesPerTrigger and maxTriggerDelay: hold a micro-batch back until enough entries wait.

As Kafka's source does with minOffsetsPerTrigger and maxTriggerDelay: a micro-batch starts only
when at least min_entries entries are readable, or when max_delay_ms has passed since the last
micro-batch started (or since the query's first decision), so a slow producer does not make a
stream of tiny micro-batches. Spark's Python API has no such read limit, so the source keeps the
delay itself, in the driver's reader (it lives for the whole query run; a restart starts the
delay afresh, as Kafka's does). Trigger.Once and Trigger.AvailableNow read all there is and are
not held back. Pure: the clock is passed in.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from pyspark_ledger.datasource.errors import OptionError

MAX_TRIGGER_DELAY_MS_DEFAULT = 15 * 60 * 1000  # Kafka's maxTriggerDelay default, 15m
MAX_TRIGGER_DELAY_MS_MAX = 7 * 24 * 3600 * 1000  # a week: longer is a unit mistake
_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d)?\s*")  # used with fullmatch


def duration_ms(option: str, text: str) -> int:
    """A duration as Spark writes them ("5s", "500ms", "15m", "1h"; a bare number is ms)."""
    m = _DURATION.fullmatch(text.lower())
    if m is None:
        raise OptionError(option, f"expected a duration such as 5s, 500ms, 15m or 1h, got {text!r}")
    ms = round(float(m.group(1)) * _UNITS_MS[m.group(2) or "ms"])
    if not 0 <= ms <= MAX_TRIGGER_DELAY_MS_MAX:
        raise OptionError(option, f"must be at most {MAX_TRIGGER_DELAY_MS_MAX} ms (a week), got {text!r}")
    return ms


@dataclass(frozen=True, slots=True)
class TriggerDelay:
    min_entries: int
    max_delay_ms: int = MAX_TRIGGER_DELAY_MS_DEFAULT


class TriggerGate:
    """Decides, at each of Spark's latestOffset calls, whether the next micro-batch may start."""

    def __init__(self, delay: TriggerDelay, clock_ms: Callable[[], float]):
        if delay.min_entries < 1 or delay.max_delay_ms < 0:
            raise ValueError(f"bad trigger delay {delay}")
        self.delay = delay
        self._clock_ms = clock_ms
        self._since_ms: float | None = None  # the last micro-batch's start, or the first decision

    def admit(self, available_entries: int) -> bool:
        """True: a micro-batch of what is available starts now (and the delay restarts from now).
        Never true with fewer than min_entries available before max_delay_ms has passed."""
        now = self._clock_ms()
        if self._since_ms is None:
            self._since_ms = now
        if available_entries <= 0:
            return False  # nothing to read: no micro-batch, the delay keeps running
        waited_ms = now - self._since_ms
        if available_entries >= self.delay.min_entries or waited_ms >= self.delay.max_delay_ms:
            self._since_ms = now
            return True
        return False
