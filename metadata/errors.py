"""One exception root for the metadata layer; each carries whether retrying can help."""

from __future__ import annotations


class MetadataError(Exception):
    """Root of every error raised by the metadata layer."""

    retriable: bool = False


class InvalidUriError(MetadataError, ValueError):
    """A metadata service URI is malformed or names an unknown scheme."""


class MetadataUnavailableError(MetadataError):
    """The metadata service could not be reached within its bounded timeout."""

    retriable = True


class NodeExistsError(MetadataError):
    """create() found the path already present."""


class NoNodeError(MetadataError):
    """The path does not exist."""


class NoSuchLogError(NoNodeError):
    """The named log does not exist."""


class LogExistsError(NodeExistsError):
    """create() found a log of that name."""


class NoSuchSubscriptionError(NoNodeError):
    """The log has no subscription of that name."""


class SubscriptionExistsError(NodeExistsError):
    """create() found a subscription of that name on the log."""


class BadVersionError(MetadataError):
    """A compare-and-set or delete found a different version: somebody else wrote first.

    The write was definitely not applied."""

    def __init__(self, path: str, expected_version: int, actual_version: int | None = None):
        self.path = path
        self.expected_version = expected_version
        self.actual_version = actual_version
        actual = "absent" if actual_version is None else str(actual_version)
        super().__init__(
            f"version conflict on {path}: expected version {expected_version}, found {actual}"
        )


class OutcomeUnknownError(MetadataError):
    """The connection was lost while a write was in flight and its outcome cannot be determined.

    The write may or may not have been applied; re-read the value and decide. This is reported
    instead of guessing, so a conflicting write is never reported as a success (or the other way)."""


class CorruptMetadataError(MetadataError):
    """Stored bytes failed their checksum or could not be parsed."""


class UnsupportedFormatVersionError(MetadataError):
    """Stored bytes were written by a newer format version than this code understands."""


class IllegalStateTransitionError(MetadataError):
    """A ledger state change that the protocol forbids (for example CLOSED -> OPEN)."""


class InvalidQuorumError(MetadataError, ValueError):
    """Ensemble, write quorum and ack quorum sizes violate E >= W >= A >= 1."""


class InvalidMetadataError(MetadataError, ValueError):
    """A metadata value violates one of its invariants (bad segment, bad id, field too long...)."""


class IdAllocationError(MetadataError):
    """Ledger id allocation gave up after its bounded number of attempts."""

    retriable = True


class NoSuchLedgerError(NoNodeError):
    """The ledger has no metadata: it never existed or was deleted."""
