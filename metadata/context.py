"""BP-44 create and close context: who made a ledger, what it belongs to, and how long it should live.

Every field is an optional hint. BookKeeper's service never enforces them; the auditor uses them
to find orphans (delete overdue, broken parent reference) and the shell shows them.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from metadata.errors import InvalidMetadataError
from metadata.ids import LedgerId, LedgerIdLike

# BP-44 bounds free-text fields at 256 bytes.
CONTEXT_TEXT_BYTES_MAX = 256


def _check_text(name: str, value: str | None) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise InvalidMetadataError(f"{name} must be a string")
    if len(value.encode("utf-8")) > CONTEXT_TEXT_BYTES_MAX:
        raise InvalidMetadataError(f"{name} is longer than {CONTEXT_TEXT_BYTES_MAX} bytes")


def _check_non_negative(name: str, value: int | float | None) -> None:
    if value is not None and value < 0:
        raise InvalidMetadataError(f"{name} must be >= 0, got {value}")


def _to_ms(value: datetime | int | float) -> int:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return int(value.timestamp() * 1000)
    return int(value)


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class Party:
    """An owner identity as BP-44's createdBy/createdOnBehalfOf: enterprise, system, service, instance."""

    enterprise: str = ""
    system: str = ""
    service: str = ""
    instance: str = ""

    def __post_init__(self) -> None:
        for name in ("enterprise", "system", "service", "instance"):
            _check_text(f"party {name}", getattr(self, name))


class CloseReason(enum.Enum):
    CLIENT_SHUTDOWN = "CLIENT_SHUTDOWN"
    MAX_LENGTH_REACHED = "MAX_LENGTH_REACHED"
    MAX_ENTRY_COUNT_REACHED = "MAX_ENTRY_COUNT_REACHED"
    NO_MORE_DATA = "NO_MORE_DATA"
    INACTIVE = "INACTIVE"
    TIME_ROTATION = "TIME_ROTATION"
    ABNORMAL = "ABNORMAL"


@dataclass(frozen=True, slots=True)
class CreateContext:
    created_by: Party | None = None
    on_behalf_of: Party | None = None
    data_set: str | None = None
    expected_max_open_duration_ms: int | None = None
    expected_average_entry_size_bytes: int | None = None
    expected_entry_size_stddev_bytes: float | None = None
    expected_max_entries: int | None = None
    expected_max_length_bytes: int | None = None
    expected_average_add_rate_per_second: int | None = None
    expected_maximum_add_rate_per_second: int | None = None
    follows_ledger: LedgerId | None = None
    child_of_ledger: LedgerId | None = None

    def __post_init__(self) -> None:
        _check_text("data set", self.data_set)
        for name in (
            "expected_max_open_duration_ms",
            "expected_average_entry_size_bytes",
            "expected_entry_size_stddev_bytes",
            "expected_max_entries",
            "expected_max_length_bytes",
            "expected_average_add_rate_per_second",
            "expected_maximum_add_rate_per_second",
        ):
            _check_non_negative(name, getattr(self, name))

    @staticmethod
    def builder() -> CreateContextBuilder:
        return CreateContextBuilder()


@dataclass(frozen=True, slots=True)
class CloseContext:
    reason: CloseReason | None = None
    abnormal_message: str | None = None
    expect_reads_until_ms: int | None = None
    expect_delete_after_ms: int | None = None

    def __post_init__(self) -> None:
        _check_text("abnormal close message", self.abnormal_message)
        if self.abnormal_message is not None and self.reason is not CloseReason.ABNORMAL:
            raise InvalidMetadataError("an abnormal close message needs reason ABNORMAL")

    @staticmethod
    def builder() -> CloseContextBuilder:
        return CloseContextBuilder()


@dataclass
class CreateContextBuilder:
    """BP-44's LedgerCreateContextBuilder, in Python spelling."""

    _ctx: CreateContext = field(default_factory=CreateContext)

    def created_by(self, enterprise: str, system: str, service: str, instance: str) -> CreateContextBuilder:
        self._ctx = replace(self._ctx, created_by=Party(enterprise, system, service, instance))
        return self

    def created_on_behalf_of(self, enterprise: str, system: str, service: str, instance: str) -> CreateContextBuilder:
        self._ctx = replace(self._ctx, on_behalf_of=Party(enterprise, system, service, instance))
        return self

    def part_of_data_set(self, data_set: str) -> CreateContextBuilder:
        self._ctx = replace(self._ctx, data_set=data_set)
        return self

    def expected_max_open_duration(self, duration: timedelta | float) -> CreateContextBuilder:
        seconds = duration.total_seconds() if isinstance(duration, timedelta) else float(duration)
        self._ctx = replace(self._ctx, expected_max_open_duration_ms=int(seconds * 1000))
        return self

    def expected_average_entry_size(self, size_bytes: int, standard_deviation: float) -> CreateContextBuilder:
        self._ctx = replace(
            self._ctx,
            expected_average_entry_size_bytes=size_bytes,
            expected_entry_size_stddev_bytes=float(standard_deviation),
        )
        return self

    def expected_max_entries(self, entry_count: int) -> CreateContextBuilder:
        self._ctx = replace(self._ctx, expected_max_entries=entry_count)
        return self

    def expected_max_length(self, length_bytes: int) -> CreateContextBuilder:
        self._ctx = replace(self._ctx, expected_max_length_bytes=length_bytes)
        return self

    def expected_average_entry_add_rate_per_second(self, entry_count: int) -> CreateContextBuilder:
        self._ctx = replace(self._ctx, expected_average_add_rate_per_second=entry_count)
        return self

    def expected_maximum_entry_add_rate_per_second(self, entry_count: int) -> CreateContextBuilder:
        self._ctx = replace(self._ctx, expected_maximum_add_rate_per_second=entry_count)
        return self

    def follows_ledger(self, preceding: LedgerIdLike) -> CreateContextBuilder:
        self._ctx = replace(self._ctx, follows_ledger=LedgerId.parse(preceding))
        return self

    def child_of_ledger(self, parent: LedgerIdLike) -> CreateContextBuilder:
        self._ctx = replace(self._ctx, child_of_ledger=LedgerId.parse(parent))
        return self

    def build(self) -> CreateContext:
        return self._ctx


@dataclass
class CloseContextBuilder:
    """BP-44's LedgerCloseContextBuilder, in Python spelling."""

    _ctx: CloseContext = field(default_factory=CloseContext)

    def _reason(self, reason: CloseReason, message: str | None = None) -> CloseContextBuilder:
        self._ctx = replace(self._ctx, reason=reason, abnormal_message=message)
        return self

    def because_client_shutdown(self) -> CloseContextBuilder:
        return self._reason(CloseReason.CLIENT_SHUTDOWN)

    def because_max_length_reached(self) -> CloseContextBuilder:
        return self._reason(CloseReason.MAX_LENGTH_REACHED)

    def because_max_entry_count_reached(self) -> CloseContextBuilder:
        return self._reason(CloseReason.MAX_ENTRY_COUNT_REACHED)

    def because_no_more_data(self) -> CloseContextBuilder:
        return self._reason(CloseReason.NO_MORE_DATA)

    def because_inactive(self) -> CloseContextBuilder:
        return self._reason(CloseReason.INACTIVE)

    def because_time_rotation(self) -> CloseContextBuilder:
        return self._reason(CloseReason.TIME_ROTATION)

    def closing_abnormally(self, error_message: str | None = None) -> CloseContextBuilder:
        return self._reason(CloseReason.ABNORMAL, error_message)

    def expect_delete_after(self, instant: datetime | int) -> CloseContextBuilder:
        """instant: a datetime, or epoch milliseconds."""
        self._ctx = replace(self._ctx, expect_delete_after_ms=_to_ms(instant))
        return self

    def expect_reads_until(self, instant: datetime | int) -> CloseContextBuilder:
        """instant: a datetime, or epoch milliseconds."""
        self._ctx = replace(self._ctx, expect_reads_until_ms=_to_ms(instant))
        return self

    def build(self) -> CloseContext:
        return self._ctx
