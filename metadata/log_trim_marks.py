"""What a log's head remembers of its trims: retention's counters and the trimmed boundary ledger.

Kept in the record's `properties` map (as metadata/log_settings.py keeps settings, for the same
reason: release 0.1.0 keeps `properties` through its compare-and-set, so a mixed fleet never
erases them), under the prefix "trim.":

    trim.retention.ledgers   ledgers retention has trimmed from this log, ever
    trim.retention.bytes     their bytes
    trim.retention.passes    retention passes that trimmed something
    trim.retention.last_ms   when the last of them did
    trim.boundary            "<seq>:<entry count>:<ledger qualified name>" of the newest trimmed ledger

Why the boundary: a reader whose position is the end of ledger S (it read every entry) and
finds S trimmed must tell that from a reader that had not finished S (data lost). Once S is
gone from the log, only this says how many entries S had.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from metadata.log_record import LogRecord

PREFIX = "trim."
_LEDGERS = "trim.retention.ledgers"
_BYTES = "trim.retention.bytes"
_PASSES = "trim.retention.passes"
_LAST_MS = "trim.retention.last_ms"
_BOUNDARY = "trim.boundary"


@dataclass(frozen=True, slots=True)
class RetentionCounts:
    ledgers: int = 0
    bytes: int = 0
    passes: int = 0
    last_ms: int | None = None


def _int(props: dict[str, str], key: str) -> int | None:
    try:
        return int(props[key])
    except (KeyError, ValueError):
        return None  # absent, or written by hand: counts as never


def retention_counts(rec: LogRecord) -> RetentionCounts:
    p = dict(rec.properties)
    return RetentionCounts(_int(p, _LEDGERS) or 0, _int(p, _BYTES) or 0, _int(p, _PASSES) or 0, _int(p, _LAST_MS))


@dataclass(frozen=True, slots=True)
class TrimBoundary:
    """The newest trimmed ledger: its seq, its entry count and its qualified name."""

    seq: int
    entry_count: int
    ledger: str


def boundary(rec: LogRecord) -> TrimBoundary | None:
    """The newest trimmed ledger, when a trim recorded it (None: none, or written by hand)."""
    raw = dict(rec.properties).get(_BOUNDARY)
    if raw is None:
        return None
    seq, _, rest = raw.partition(":")
    count, _, ledger = rest.partition(":")
    try:
        return TrimBoundary(int(seq), int(count), ledger)
    except ValueError:
        return None


def _with(rec: LogRecord, changes: dict[str, str]) -> LogRecord:
    return replace(rec, properties=tuple(sorted(dict(rec.properties, **changes).items())))


def with_boundary(rec: LogRecord, seq: int, entry_count: int, ledger: str) -> LogRecord:
    if seq < 0 or entry_count < 0 or ":" in ledger:
        raise ValueError(f"trim boundary seq {seq} entry count {entry_count} ledger {ledger!r}: bad value")
    return _with(rec, {_BOUNDARY: f"{seq}:{entry_count}:{ledger}"})


def with_retention_trim(rec: LogRecord, ledgers: int, size_bytes: int, at_ms: int) -> LogRecord:
    """Count one retention pass that trimmed `ledgers` ledgers of `size_bytes` bytes."""
    if ledgers <= 0 or size_bytes < 0:
        raise ValueError(f"a counted trim removes ledgers ({ledgers}) of >= 0 bytes ({size_bytes})")
    c = retention_counts(rec)
    return _with(rec, {_LEDGERS: str(c.ledgers + ledgers), _BYTES: str(c.bytes + size_bytes),
                       _PASSES: str(c.passes + 1), _LAST_MS: str(at_ms)})
