"""What the log layer needs of a client, as a Protocol: the log room never imports the client
(which imports the log room to offer open_log_writer and friends)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from metadata import CreateContext, LedgerId
from metadata.logs import LogManager

if TYPE_CHECKING:
    from pyspark_ledger.ledger.read_handle import ReadHandle
    from pyspark_ledger.ledger.write_handle import WriteHandle


class LedgerService(Protocol):
    """The log records and ledgers to create, open and delete. LedgerClient satisfies it
    structurally; tests wrap it to inject faults."""

    logs: LogManager

    def create_ledger(self, ensemble_size: int, write_quorum_size: int, ack_quorum_size: int, digest_type: str,
                      password: bytes, *, create_context: CreateContext | None = None,
                      custom: Mapping[str, bytes] | None = None) -> WriteHandle: ...

    def open_ledger(self, ledger_id: LedgerId, recovery: bool = False, password: bytes = b"") -> ReadHandle: ...

    def delete_ledger(self, ledger_id: LedgerId) -> None: ...
