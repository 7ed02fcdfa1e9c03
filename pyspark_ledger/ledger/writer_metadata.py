"""A writer's compare-and-set loops on its own ledger's metadata: record a fragment, seal.

The decisions are the writer machine's (protocol.writer_machine): what to write, whether a
conflict is retried (the ledger still OPEN) or ends the writer (fenced), when attempts run out,
whether a ledger closed by somebody else is closed where this writer would have closed it. These
loops only do the I/O: each machine call runs under the handle's lock, no call to the metadata
store does, so answers from bookies keep flowing during a compare-and-set.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager

from metadata import BadVersionError, CloseContext, LedgerManager, LedgerMetadata, MetadataError
from pyspark_ledger.protocol.invariants import InvariantError
from pyspark_ledger.protocol.writer_machine import (
    ChangeDone,
    Seal,
    Sealed,
    Stop,
    WriteFragment,
    WriterCommand,
    WriterMachine,
)

log = logging.getLogger(__name__)


def record_fragment(ledgers: LedgerManager, meta: LedgerMetadata, version: int, cmd: WriteFragment,
                    machine: WriterMachine, lock: AbstractContextManager[object]
                    ) -> tuple[ChangeDone | Stop, LedgerMetadata, int]:
    """Write the fragment the machine asked for, on the newest version while it says retry.
    Returns the machine's last command and the metadata as last written or read."""
    c: WriterCommand = cmd
    while isinstance(c, WriteFragment):
        new = meta.with_ensemble_change(c.first_entry_id, c.ensemble)
        try:
            version = ledgers.compare_and_set(new, version)
        except BadVersionError:
            try:
                meta, version = ledgers.read(meta.ledger_id)
            except MetadataError as exc:
                with lock:
                    c = machine.on_fragment_failed(f"ensemble change failed: {exc}")
                continue
            with lock:
                c = machine.on_fragment_conflict(meta.state.value)
            continue
        except MetadataError as exc:
            with lock:
                c = machine.on_fragment_failed(f"ensemble change failed: {exc}")
            continue
        meta = new
        with lock:
            c = machine.on_fragment_written()
    if not isinstance(c, (ChangeDone, Stop)):
        raise InvariantError(f"a fragment write ended with {c!r}")
    return c, meta, version


def write_close(ledgers: LedgerManager, meta: LedgerMetadata, version: int, machine: WriterMachine,
                lock: AbstractContextManager[object], close_context: CloseContext | None
                ) -> tuple[Sealed | Stop, LedgerMetadata, int]:
    """Close as the writer at its LAC ("Closing a ledger as a writer"), re-reading on conflict.
    Metadata store errors other than a conflict propagate (the close fails, and stays failed)."""
    with lock:
        c: WriterCommand = machine.close_command(meta.state.value, meta.last_entry_id)
    while isinstance(c, Seal):
        new = meta.close(c.last_entry_id, c.length, close_context=close_context)
        try:
            version = ledgers.compare_and_set(new, version)
        except BadVersionError:
            meta, version = ledgers.read(meta.ledger_id)
            with lock:
                c = machine.on_seal_conflict(meta.state.value, meta.last_entry_id)
            continue
        meta = new
        with lock:
            c = machine.on_sealed()
        log.info("ledger closed ledger=%s last_entry=%d length=%d", meta.ledger_id, c.last_entry_id, c.length)
    if not isinstance(c, (Sealed, Stop)):
        raise InvariantError(f"a close ended with {c!r}")
    return c, meta, version
