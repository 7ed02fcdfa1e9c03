"""An Arrow entry's append time (docs/entry-format.md, "Arrow entries").

An Arrow log's entry is one Arrow IPC stream (format 2: the entry format has no field of its
own for it), so its append time travels in the stream's schema metadata under APPEND_MS_KEY: one
time per entry, which every row of the entry shows as its `timestamp`. Any Arrow IPC reader,
and releases before this one, read such an entry as before (they ignore schema metadata). A
writer that stamps its entries names that in the ledger's custom metadata (TIMED_LEDGER_KEY), so
a search by time knows which ledgers' entries have times of their own without reading one;
entries of other ledgers (written before) keep their ledger's join time.

Pure: no clock here, the writer passes the time.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from pyspark_ledger.errors import EntryFormatError

APPEND_MS_KEY = b"pyspark_ledger.append_ms"  # in an entry's IPC schema metadata: decimal ms since the epoch
TIMED_LEDGER_KEY = "arrow-entry-times"  # in a ledger's custom metadata: its Arrow entries carry APPEND_MS_KEY
TIMED_LEDGER_VALUE = b"1"
_DIGITS_MAX = 19  # an i64's decimal digits: a longer value is not a time


class ArrowTimeError(EntryFormatError):
    """An Arrow entry's append time is not a time (a broken or foreign writer)."""


def stamped_schema(schema: pa.Schema, append_ms: int) -> pa.Schema:
    """`schema` carrying `append_ms` (the schema's own metadata kept)."""
    if not 0 <= append_ms < 2**63:
        raise ArrowTimeError(f"an Arrow entry's append time must be ms since the epoch, got {append_ms}")
    return schema.with_metadata({**(schema.metadata or {}), APPEND_MS_KEY: str(append_ms).encode()})


def append_ms_of(schema: pa.Schema, where: str = "an Arrow entry") -> int | None:
    """The append time an entry's IPC schema carries, or None (an entry written before times)."""
    raw = (schema.metadata or {}).get(APPEND_MS_KEY)
    if raw is None:
        return None
    if not (0 < len(raw) <= _DIGITS_MAX and raw.isdigit()):
        raise ArrowTimeError(f"{where}: append time {raw[:40]!r} in its schema metadata is not ms since the epoch")
    return int(raw)


def entry_append_ms(payload: bytes | pa.Buffer, where: str = "an Arrow entry") -> int | None:
    """The append time of one Arrow entry (its IPC stream's schema only is read), or None."""
    return append_ms_of(pa.ipc.open_stream(payload).schema, where)


def ledger_is_timed(custom: Mapping[str, bytes]) -> bool:
    """Whether a ledger's Arrow entries carry their own append times (its writer said so)."""
    return custom.get(TIMED_LEDGER_KEY) == TIMED_LEDGER_VALUE
