"""A writer's compare-and-set loops on its own ledger's metadata: append a fragment, seal.

Both re-read on a version conflict and decide again from what the metadata holds now (the
rules are protocol.close_rules'), so the writer's view never drifts from the metadata: it only
ever adopts a value it read or wrote.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from metadata import BadVersionError, CloseContext, LedgerManager, LedgerMetadata, LedgerState, MetadataError
from pyspark_ledger.errors import LedgerError, LedgerFencedError
from pyspark_ledger.protocol.close_rules import CloseVerdict, writer_close_verdict

log = logging.getLogger(__name__)

METADATA_CAS_ATTEMPTS_MAX = 50


def append_fragment(ledgers: LedgerManager, meta: LedgerMetadata, version: int, first_entry_id: int,
                    ensemble: Sequence[str]) -> tuple[LedgerMetadata, int]:
    """Record a new fragment from `first_entry_id` on `ensemble`; retried on conflict while the
    ledger is OPEN. Returns the metadata as written and its version."""
    for _ in range(METADATA_CAS_ATTEMPTS_MAX):
        if meta.state is not LedgerState.OPEN:
            raise LedgerFencedError(f"ledger {meta.ledger_id} is {meta.state.value}: another client is recovering it")
        new = meta.with_ensemble_change(first_entry_id, tuple(ensemble))
        try:
            return new, ledgers.compare_and_set(new, version)
        except BadVersionError:
            meta, version = ledgers.read(meta.ledger_id)
        except MetadataError as exc:
            raise LedgerError(f"ledger {meta.ledger_id}: ensemble change failed: {exc}") from exc
    raise LedgerError(f"ledger {meta.ledger_id}: ensemble change kept conflicting")


def seal(ledgers: LedgerManager, meta: LedgerMetadata, version: int, last: int, length: int,
         close_context: CloseContext | None) -> tuple[LedgerMetadata, int]:
    """Close as the writer at its LAC ("Closing a ledger as a writer"). Returns the closed
    metadata; raises LedgerFencedError if another client recovered (or is recovering) it."""
    for _ in range(METADATA_CAS_ATTEMPTS_MAX):
        verdict = writer_close_verdict(meta.state.value, meta.last_entry_id, last)
        if verdict is CloseVerdict.DONE:
            return meta, version  # somebody closed it exactly where this writer would have
        if verdict is CloseVerdict.FENCED:
            if meta.state is LedgerState.IN_RECOVERY:
                raise LedgerFencedError(f"ledger {meta.ledger_id} is being recovered by another client; close refused")
            raise LedgerFencedError(
                f"ledger {meta.ledger_id} was closed by another client at entry {meta.last_entry_id}, "
                f"but this writer had acknowledged up to {last}"
            )
        new = meta.close(last, length, close_context=close_context)
        try:
            version = ledgers.compare_and_set(new, version)
        except BadVersionError:
            meta, version = ledgers.read(meta.ledger_id)
            continue
        log.info("ledger closed ledger=%s last_entry=%d length=%d", meta.ledger_id, last, length)
        return new, version
    raise LedgerError(f"ledger {meta.ledger_id}: close kept conflicting")
