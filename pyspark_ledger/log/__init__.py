"""Named logs: an ordered list of ledgers with a single writer, positions, tailing and retention.

Opening a log as writer (reference/bookkeeper-protocol.md "Opening a log", Oxia epochs):
  1. bump the log's writer epoch by compare-and-set: every later change by an older writer fails;
  2. fence and recover every ledger of the log that is not sealed (normally the last one or two:
     the old writer may have been rolling over, or may have stopped after a failed seal);
  3. create a new ledger and append it by compare-and-set, checking the epoch is still ours.
Nothing is written before step 3 succeeds. Rollover appends the new ledger (by CAS) before the old
one is closed. A position is (ledger sequence number, entry id, index): totally ordered along the
log; index is a message's place in a batched entry (0 for an unbatched one).

The room: position (Position, LogEntry), service (what the log needs of a client), errors,
writer (LogWriter), reader (LogReader), subscription (a reader's durable position), retention
(trims). This module only re-exports them.
"""

from pyspark_ledger.log.batching import BatchSettings, MessageHandle
from pyspark_ledger.log.errors import LogFencedError, LogFormatError, LogWriterStoppedError, NotSubscribedError
from pyspark_ledger.log.position import LogEntry, Position
from pyspark_ledger.log.reader import TAIL_WAIT_S, LogReader
from pyspark_ledger.log.retention import choose_trim, set_retention, trim_log
from pyspark_ledger.log.service import LedgerService
from pyspark_ledger.log.writer import LedgerOptions, LogWriter

__all__ = [
    "BatchSettings", "LedgerOptions", "LedgerService", "LogEntry", "LogFencedError", "LogFormatError", "LogReader",
    "LogWriter", "LogWriterStoppedError", "MessageHandle", "NotSubscribedError",
    "Position", "TAIL_WAIT_S", "choose_trim", "set_retention", "trim_log",
]
