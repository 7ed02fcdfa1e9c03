"""The offload room's errors (under the client's LedgerError root)."""

from __future__ import annotations

from pyspark_ledger.errors import LedgerError


class OffloadError(LedgerError):
    """Root of the offload room's errors."""


class StoreError(OffloadError):
    """The object store failed or refused (unreachable, no such bucket, denied); retry later."""

    retriable = True


class BadStoreUriError(OffloadError, ValueError):
    """An offload store URI this release cannot use (names the URI and what is wrong)."""


class OffloadedFileError(OffloadError):
    """An offloaded file is missing, damaged or does not hold what its record says."""


class OffloadRefusedError(OffloadError):
    """This ledger cannot be offloaded by this caller now (not sealed, a `mac` ledger without its
    password, another attempt won); the message says which."""
