"""Client exceptions: one root, and each says whether retrying can help."""

from __future__ import annotations

from metadata.errors import MetadataError


class PySparkLedgerError(Exception):
    """Root of every exception the pyspark_ledger package defines (tests/test_exception_roots.py).
    Not caught as such: it also covers bugs (protocol.invariants.InvariantError) and bad input
    (options, passwords), which `except LedgerError` must not swallow."""


class LedgerError(PySparkLedgerError):
    """Root of every error the ledger client raises (metadata errors keep their own root)."""

    retriable: bool = False


class BookieUnavailableError(LedgerError):
    """Transport failure talking to a bookie: unreachable, timed out, stream broken."""

    retriable = True

    def __init__(self, bookie: str, detail: str):
        self.bookie = bookie
        super().__init__(f"bookie {bookie} unavailable: {detail}")


class BookieRefusedError(BookieUnavailableError):
    """The bookie refused the call for missing or wrong credentials (PERMISSION_DENIED or
    UNAUTHENTICATED, docs/security.md). A BookieUnavailableError so that callers that move on to
    another bookie keep doing so; retrying the same call with the same credentials cannot help."""

    retriable = False

    def __init__(self, bookie: str, detail: str):  # skips BookieUnavailableError.__init__: another message
        self.bookie = bookie
        LedgerError.__init__(self, f"bookie {bookie} refused: {detail}")


class BookieBusyError(BookieUnavailableError):
    """The bookie refused the call for now, at a bound of its own (gRPC RESOURCE_EXHAUSTED: e.g. its
    LAC long polls are all taken, bookie/long_polls.py). Retry later, or without the wait."""


class BookieStatusError(LedgerError):
    """A bookie answered with a protocol status other than OK."""

    def __init__(self, bookie: str, status: int, detail: str = ""):
        from bookie.status import Status

        self.bookie = bookie
        self.status = Status(status)
        super().__init__(f"bookie {bookie} answered {self.status.name}" + (f": {detail}" if detail else ""))


class NotEnoughBookiesError(LedgerError):
    """Fewer suitable (writable, live, not excluded) bookies than the ensemble needs."""

    retriable = True


class NotEnoughRacksError(NotEnoughBookiesError):
    """enforce_min_racks is on and the writable bookies span too few racks for a write set
    (protocol/placement.py); the message names the racks with and without writable bookies."""


class LedgerFencedError(LedgerError):
    """The ledger was fenced or closed by someone else: this writer may not add any more."""


class LedgerClosedError(LedgerError):
    """The ledger is closed (or this handle was closed)."""


class BadPasswordError(LedgerError):
    """The password does not match the ledger's."""


class DigestMismatchError(LedgerError):
    """An entry failed its digest check (corrupt, or the wrong password for a 'mac' ledger)."""


class EntryFormatError(LedgerError):
    """Bytes that are not a valid entry of the expected ledger and id."""


class ReadError(LedgerError):
    """An entry could not be read from any bookie of its write set."""


class AddTimeoutError(LedgerError):
    retriable = True


__all__ = [
    "AddTimeoutError", "BadPasswordError", "BookieStatusError", "BookieUnavailableError", "DigestMismatchError",
    "EntryFormatError", "LedgerClosedError", "LedgerError", "LedgerFencedError", "MetadataError",
    "NotEnoughBookiesError", "ReadError",
]
