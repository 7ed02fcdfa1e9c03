"""Metadata layer: ledger ids, ledger metadata, and the stores that keep them (ZooKeeper or SQLite).

Imports neither grpc nor pyspark; the bookie and the client build on it.
"""

from metadata.context import CloseContext, CloseReason, CreateContext, Party
from metadata.errors import (
    BadVersionError,
    CorruptMetadataError,
    IdAllocationError,
    IllegalStateTransitionError,
    InvalidMetadataError,
    InvalidQuorumError,
    InvalidUriError,
    MetadataError,
    MetadataUnavailableError,
    NodeExistsError,
    NoNodeError,
    NoSuchLedgerError,
    OutcomeUnknownError,
    UnsupportedFormatVersionError,
)
from metadata.ids import LedgerId, LedgerIdLike
from metadata.ledger import METADATA_FORMAT_VERSION, DigestType, LedgerMetadata, LedgerState, Segment
from metadata.ledgers import LedgerManager
from metadata.quorum import QuorumConfig, validate_quorum, write_set
from metadata.registry import BookieInfo, BookieRegistration, BookieRegistry
from metadata.store import MetadataStore, RetryPolicy, Versioned
from metadata.uri import open_store, parse_uri

__all__ = [
    "BadVersionError", "BookieInfo", "BookieRegistration", "BookieRegistry", "CloseContext", "CloseReason",
    "CorruptMetadataError", "CreateContext", "DigestType", "IdAllocationError", "IllegalStateTransitionError",
    "InvalidMetadataError", "InvalidQuorumError", "InvalidUriError", "LedgerId", "LedgerIdLike", "LedgerManager",
    "LedgerMetadata", "LedgerState", "METADATA_FORMAT_VERSION", "MetadataError", "MetadataStore",
    "MetadataUnavailableError", "NoNodeError", "NoSuchLedgerError", "NodeExistsError", "OutcomeUnknownError",
    "Party", "QuorumConfig", "RetryPolicy", "Segment", "UnsupportedFormatVersionError", "Versioned",
    "open_store", "parse_uri", "validate_quorum", "write_set",
]
