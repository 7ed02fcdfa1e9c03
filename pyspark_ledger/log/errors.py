"""Why a log writer stopped appending."""

from __future__ import annotations

from pyspark_ledger.errors import LedgerError, LedgerFencedError


class LogWriterStoppedError(LedgerError):
    """This log writer appends no more: open a new writer, whose takeover recovers (fences and
    closes) whatever this one left open. Raised by every append after the stop."""


class LogFencedError(LogWriterStoppedError, LedgerFencedError):
    """Another writer opened the log: this writer may not append any more."""


class StaleEpochError(LogFencedError):
    """A writer whose writer epoch is no longer the log's: another writer (a LogWriter, a Spark
    batch job, a streaming query) took the log over after it. Nothing of the stale writer's
    commit became visible. Names the log and both epochs."""

    def __init__(self, log_name: str, current_epoch: int, writer_epoch: int, writer: str = "this writer"):
        super().__init__(
            f"log {log_name!r}: another writer took over (epoch {current_epoch}, {writer} has {writer_epoch}); "
            "nothing more of this writer is appended"
        )
        self.log_name = log_name
        self.current_epoch = current_epoch
        self.writer_epoch = writer_epoch
        self.writer = writer

    def __reduce__(self) -> tuple[type, tuple[str, int, int, str]]:  # picklable (Spark ships errors)
        return (StaleEpochError, (self.log_name, self.current_epoch, self.writer_epoch, self.writer))


class LogFormatError(LedgerError):
    """The log's messages are in a format this release cannot read (metadata.log_record's
    message format, or an entry format): refused by name rather than handed over as bytes."""


class NotSubscribedError(LedgerError, ValueError):
    """A subscription call on a log reader opened without `subscription=`."""
