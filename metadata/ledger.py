"""The ledger metadata model: an immutable value whose state changes return a new value.

State machine (reference/bookkeeper-protocol.md):

    OPEN --start_recovery--> IN_RECOVERY --close--> CLOSED
    OPEN --close--------------------------------> CLOSED
    IN_RECOVERY --start_recovery--> IN_RECOVERY   (a new recoverer takes over a stalled recovery)

Every other move (CLOSED -> anything, IN_RECOVERY -> OPEN) raises IllegalStateTransitionError.
Persisting a new value is always a compare-and-set on the stored version (see metadata.ledgers).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from metadata.context import CloseContext, CreateContext, now_ms
from metadata.errors import IllegalStateTransitionError, InvalidMetadataError
from metadata.ids import LedgerId
from metadata.password_digest import check_password as password_matches
from metadata.password_digest import legacy_password_digest
from metadata.password_digest import password_digest as new_password_digest
from metadata.quorum import QuorumConfig, validate_quorum

# Version of the stored metadata format this code writes. Readers refuse newer versions.
METADATA_FORMAT_VERSION = 1

CUSTOM_KEYS_MAX = 256
CUSTOM_VALUE_BYTES_MAX = 64 * 1024
BOOKIE_ID_CHARS_MAX = 256


class LedgerState(enum.Enum):
    OPEN = "OPEN"
    IN_RECOVERY = "IN_RECOVERY"
    CLOSED = "CLOSED"


class DigestType(enum.Enum):
    CRC32C = "crc32c"
    MAC = "mac"
    NONE = "none"

    @classmethod
    def parse(cls, value: str | DigestType) -> DigestType:
        if isinstance(value, DigestType):
            return value
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            names = ", ".join(d.value for d in cls)
            raise InvalidMetadataError(f"unknown digest type {value!r} (expected one of {names})") from None


class FrozenMapping(dict[str, bytes]):
    """A dict that refuses mutation and still pickles (Spark ships metadata to executors)."""

    def _readonly(self, *args: object, **kwargs: object) -> None:
        raise TypeError("ledger metadata is immutable; use with_custom()")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _readonly  # type: ignore[assignment]  # refuse every mutator

    def __reduce__(self) -> tuple[type, tuple[dict[str, bytes]]]:
        return (FrozenMapping, (dict(self),))

    def __hash__(self) -> int:  # type: ignore[override]  # dict is unhashable; this one is immutable
        return hash(tuple(sorted(self.items())))


@dataclass(frozen=True, slots=True)
class Segment:
    """A fragment: entries from first_entry_id on are stored on this ensemble (until the next segment)."""

    first_entry_id: int
    bookies: tuple[str, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.bookies, tuple):
            object.__setattr__(self, "bookies", tuple(self.bookies))
        if self.first_entry_id < 0:
            raise InvalidMetadataError(f"segment first entry id must be >= 0, got {self.first_entry_id}")
        if len(set(self.bookies)) != len(self.bookies):
            raise InvalidMetadataError(f"segment ensemble repeats a bookie: {list(self.bookies)}")
        for b in self.bookies:
            if not b or len(b) > BOOKIE_ID_CHARS_MAX:
                raise InvalidMetadataError(f"bad bookie id in ensemble: {b!r}")


@dataclass(frozen=True, slots=True)
class LedgerMetadata:
    ledger_id: LedgerId
    ensemble_size: int
    write_quorum_size: int
    ack_quorum_size: int
    segments: tuple[Segment, ...]
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int | None = None  # set only when CLOSED; -1 = closed empty
    length_bytes: int | None = None  # set only when CLOSED
    digest_type: DigestType = DigestType.CRC32C
    password_digest: bytes = b""
    ctime_ms: int = field(default_factory=now_ms)
    seal_time_ms: int | None = None
    create_context: CreateContext | None = None
    close_context: CloseContext | None = None
    custom: Mapping[str, bytes] = field(default_factory=dict)
    format_version: int = METADATA_FORMAT_VERSION

    def __post_init__(self) -> None:
        if not isinstance(self.segments, tuple):
            object.__setattr__(self, "segments", tuple(self.segments))
        # A read-only copy: the value is immutable all the way down.
        object.__setattr__(self, "custom", FrozenMapping(self.custom))
        validate_quorum(self.ensemble_size, self.write_quorum_size, self.ack_quorum_size)
        if not self.segments:
            raise InvalidMetadataError(f"ledger {self.ledger_id}: at least one ensemble is required")
        if self.segments[0].first_entry_id != 0:
            raise InvalidMetadataError(f"ledger {self.ledger_id}: the first ensemble must start at entry 0")
        for prev, seg in zip(self.segments, self.segments[1:]):
            if seg.first_entry_id <= prev.first_entry_id:
                raise InvalidMetadataError(
                    f"ledger {self.ledger_id}: ensemble first entries must increase "
                    f"({prev.first_entry_id} then {seg.first_entry_id})"
                )
        for seg in self.segments:
            if len(seg.bookies) != self.ensemble_size:
                raise InvalidMetadataError(
                    f"ledger {self.ledger_id}: ensemble {list(seg.bookies)} has {len(seg.bookies)} bookies, "
                    f"ensemble size is {self.ensemble_size}"
                )
        closed = self.state is LedgerState.CLOSED
        if closed != (self.last_entry_id is not None) or closed != (self.length_bytes is not None):
            raise InvalidMetadataError(
                f"ledger {self.ledger_id}: last entry id and length are set exactly when the ledger is CLOSED"
            )
        if closed and (self.last_entry_id < -1 or self.length_bytes < 0):  # type: ignore[operator]  # closed: both set (checked above)
            raise InvalidMetadataError(f"ledger {self.ledger_id}: bad last entry id or length")
        if self.close_context is not None and not closed:
            raise InvalidMetadataError(f"ledger {self.ledger_id}: a close context needs a CLOSED ledger")
        if len(self.custom) > CUSTOM_KEYS_MAX:
            raise InvalidMetadataError(f"ledger {self.ledger_id}: more than {CUSTOM_KEYS_MAX} custom keys")
        for k, v in self.custom.items():
            if not isinstance(k, str) or not isinstance(v, (bytes, bytearray)):
                raise InvalidMetadataError(f"ledger {self.ledger_id}: custom metadata maps str to bytes")
            if len(v) > CUSTOM_VALUE_BYTES_MAX:
                raise InvalidMetadataError(f"ledger {self.ledger_id}: custom value {k!r} is too large")

    # ---- construction -------------------------------------------------------------------------

    @classmethod
    def new(
        cls,
        ledger_id: LedgerId,
        quorum: QuorumConfig,
        ensemble: list[str] | tuple[str, ...],
        *,
        digest_type: DigestType | str = DigestType.CRC32C,
        password: bytes = b"",
        create_context: CreateContext | None = None,
        custom: Mapping[str, bytes] | None = None,
        ctime_ms: int | None = None,
        salted_digest: bool = True,
    ) -> LedgerMetadata:
        """salted_digest False keeps the password digest in the format release 0.1.0 checks
        (metadata.password_digest): clients follow the cluster setting salted_password_digests."""
        digest = new_password_digest(password) if salted_digest else legacy_password_digest(password)
        return cls(
            ledger_id=ledger_id,
            ensemble_size=quorum.ensemble_size,
            write_quorum_size=quorum.write_quorum_size,
            ack_quorum_size=quorum.ack_quorum_size,
            segments=(Segment(0, tuple(ensemble)),),
            digest_type=DigestType.parse(digest_type),
            password_digest=digest,
            ctime_ms=now_ms() if ctime_ms is None else ctime_ms,
            create_context=create_context,
            custom=custom or {},
        )

    # ---- queries ------------------------------------------------------------------------------

    @property
    def quorum(self) -> QuorumConfig:
        return QuorumConfig(self.ensemble_size, self.write_quorum_size, self.ack_quorum_size)

    @property
    def is_closed(self) -> bool:
        return self.state is LedgerState.CLOSED

    def segment_index_for(self, entry_id: int) -> int:
        """Index of the segment that stores entry_id (the last one starting at or before it)."""
        if entry_id < 0:
            raise InvalidMetadataError(f"entry id must be >= 0, got {entry_id}")
        lo, hi = 0, len(self.segments) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.segments[mid].first_entry_id <= entry_id:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def ensemble_for(self, entry_id: int) -> tuple[str, ...]:
        return self.segments[self.segment_index_for(entry_id)].bookies

    def segment_last_entry_id(self, index: int) -> int | None:
        """Last entry id of segment `index`, or None for the open-ended last segment of an unclosed ledger."""
        if index + 1 < len(self.segments):
            return self.segments[index + 1].first_entry_id - 1
        return self.last_entry_id if self.is_closed else None

    def bookies(self) -> set[str]:
        return {b for seg in self.segments for b in seg.bookies}

    def check_password(self, password: bytes) -> bool:
        """Whether `password` is the ledger's (metadata.password_digest: salted, either format;
        cached per process). Raises UnknownPasswordDigestError for a digest of a newer client."""
        return password_matches(self.password_digest, password)

    # ---- state changes (each returns a new value) ---------------------------------------------

    def _refuse(self, action: str) -> IllegalStateTransitionError:
        return IllegalStateTransitionError(
            f"ledger {self.ledger_id}: cannot {action} a ledger in state {self.state.value}"
        )

    def start_recovery(self) -> LedgerMetadata:
        if self.state is LedgerState.CLOSED:
            raise self._refuse("start recovery of")
        return replace(self, state=LedgerState.IN_RECOVERY)

    def close(
        self,
        last_entry_id: int,
        length_bytes: int,
        *,
        close_context: CloseContext | None = None,
        seal_time_ms: int | None = None,
    ) -> LedgerMetadata:
        if self.state is LedgerState.CLOSED:
            raise self._refuse("close")
        if last_entry_id < -1 or length_bytes < 0:
            raise InvalidMetadataError(
                f"ledger {self.ledger_id}: bad close (last entry {last_entry_id}, length {length_bytes})"
            )
        # Segments that start after the last entry hold nothing; drop them so readers plan no empty ranges.
        segments = tuple(s for i, s in enumerate(self.segments) if i == 0 or s.first_entry_id <= last_entry_id)
        return replace(
            self,
            state=LedgerState.CLOSED,
            last_entry_id=last_entry_id,
            length_bytes=length_bytes,
            segments=segments,
            close_context=close_context,
            seal_time_ms=now_ms() if seal_time_ms is None else seal_time_ms,
        )

    def reopen(self) -> LedgerMetadata:
        """Never legal: a sealed or recovering ledger does not become writable again."""
        raise self._refuse("reopen")

    def with_ensemble_change(self, first_entry_id: int, bookies: list[str] | tuple[str, ...]) -> LedgerMetadata:
        """A new fragment starting at first_entry_id (the first unacknowledged entry).

        Legal while OPEN (the writer) or IN_RECOVERY (recovery re-replicating). A new fragment at
        the same first entry as the last one replaces it: nothing was acknowledged in it."""
        if self.state is LedgerState.CLOSED:
            raise self._refuse("change the ensemble of")
        last = self.segments[-1]
        if first_entry_id < last.first_entry_id:
            raise InvalidMetadataError(
                f"ledger {self.ledger_id}: new ensemble starts at {first_entry_id}, "
                f"before the current one ({last.first_entry_id})"
            )
        new_seg = Segment(first_entry_id, tuple(bookies))
        if first_entry_id == last.first_entry_id:
            segments = self.segments[:-1] + (new_seg,)
        else:
            segments = self.segments + (new_seg,)
        return replace(self, segments=segments)

    def with_replaced_bookie(self, segment_index: int, old: str, new: str) -> LedgerMetadata:
        """Swap one replica of one fragment (re-replication of a lost bookie; legal in any state)."""
        seg = self.segments[segment_index]
        if old not in seg.bookies:
            raise InvalidMetadataError(f"ledger {self.ledger_id}: {old} is not in ensemble {segment_index}")
        bookies = tuple(new if b == old else b for b in seg.bookies)
        segments = list(self.segments)
        segments[segment_index] = Segment(seg.first_entry_id, bookies)
        return replace(self, segments=tuple(segments))

    def with_custom(self, key: str, value: bytes | None) -> LedgerMetadata:
        custom = dict(self.custom)
        if value is None:
            custom.pop(key, None)
        else:
            custom[key] = bytes(value)
        return replace(self, custom=custom)
