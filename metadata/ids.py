"""128-bit ledger ids (BP-35): a 64-bit scope id (the most significant half) and a 64-bit ledger id.

Scope 0 is the default; ids in scope 0 are allocated by the metadata store and never reused.
Ids in other scopes may be generated without coordination from a UUID split in two halves.
The qualified name is the 128-bit value as 32 lowercase hex digits (scope first).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

from metadata.errors import InvalidMetadataError

U64_MAX = 2**64 - 1
_QUALIFIED_RE = re.compile(r"[0-9a-fA-F]{32}")


def _check_u64(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidMetadataError(f"{name} must be an integer, got {type(value).__name__}")
    if not 0 <= value <= U64_MAX:
        raise InvalidMetadataError(f"{name} must be an unsigned 64-bit integer, got {value}")
    return value


@dataclass(frozen=True, order=True, slots=True)
class LedgerId:
    """A ledger's 128-bit id. Ordered by (scope_id, id), which is the order of the 128-bit value."""

    scope_id: int
    id: int

    def __post_init__(self) -> None:
        _check_u64("scope id", self.scope_id)
        _check_u64("ledger id", self.id)

    @property
    def qualified_name(self) -> str:
        return f"{self.scope_id:016x}{self.id:016x}"

    @property
    def value(self) -> int:
        """The id as one 128-bit integer."""
        return (self.scope_id << 64) | self.id

    @classmethod
    def from_qualified_name(cls, name: str) -> LedgerId:
        if not isinstance(name, str) or not _QUALIFIED_RE.fullmatch(name):
            raise InvalidMetadataError(
                f"not a ledger qualified name (32 hex digits expected): {name!r}"
            )
        return cls(int(name[:16], 16), int(name[16:], 16))

    @classmethod
    def random_scoped(cls) -> LedgerId:
        """A coordination-free id outside scope 0: a random UUID split in two halves.

        The scope half is never 0 (scope 0 belongs to the store's allocator)."""
        while True:
            value = uuid.uuid4().int
            scope, lid = value >> 64, value & U64_MAX
            if scope != 0:
                return cls(scope, lid)

    @classmethod
    def parse(cls, value: LedgerIdLike) -> LedgerId:
        """Accept a LedgerId, an int (scope 0), a (scope, id) pair, a qualified name or a decimal string."""
        if isinstance(value, LedgerId):
            return value
        if isinstance(value, bool):
            raise InvalidMetadataError(f"not a ledger id: {value!r}")
        if isinstance(value, int):
            return cls(0, value)
        if isinstance(value, tuple) and len(value) == 2:
            return cls(_check_u64("scope id", value[0]), _check_u64("ledger id", value[1]))
        if isinstance(value, str):
            text = value.strip()
            if _QUALIFIED_RE.fullmatch(text):
                return cls.from_qualified_name(text)
            if text.isascii() and text.isdigit():  # not "١٢" (Unicode digits int() would take)
                return cls(0, int(text))
            raise InvalidMetadataError(
                f"not a ledger id: {value!r} (expected a decimal id or 32 hex digits)"
            )
        raise InvalidMetadataError(f"not a ledger id: {value!r}")

    def __str__(self) -> str:
        if self.scope_id == 0:
            return str(self.id)
        return self.qualified_name


LedgerIdLike = LedgerId | int | tuple[int, int] | str
