"""Why a log writer stopped appending."""

from __future__ import annotations

from pyspark_ledger.errors import LedgerError, LedgerFencedError


class LogWriterStoppedError(LedgerError):
    """This log writer appends no more: open a new writer, whose takeover recovers (fences and
    closes) whatever this one left open. Raised by every append after the stop."""


class LogFencedError(LogWriterStoppedError, LedgerFencedError):
    """Another writer opened the log: this writer may not append any more."""
