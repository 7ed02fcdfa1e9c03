"""Re-replication: copy the fragments a lost bookie held to a replacement, then swap it in metadata.

Copy first, then compare-and-set the ensemble: a crash in between leaves only an unreferenced copy
on the new bookie (garbage, never a hole). Only sealed (CLOSED) ledgers are re-replicated; open
ones must be recovered first, which is what `ledger recover --bookie` does.
"""

from __future__ import annotations

import logging
import threading
from bookie.status import Status
from metadata import LedgerId, LedgerMetadata, write_set
from pyspark_ledger.protocol.digest import master_key
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.ledger.context import LedgerContext
from pyspark_ledger.ledger.read_handle import ReadHandle

log = logging.getLogger(__name__)

COPY_BATCH_ENTRIES = 1_000
COPY_TIMEOUT_S = 60.0


def fragments_on(meta: LedgerMetadata, bookie_id: str) -> list[int]:
    return [i for i, seg in enumerate(meta.segments) if bookie_id in seg.bookies]


def rereplicate(context: LedgerContext, ledger: LedgerId, lost: str, password: bytes = b"", *, dry_run: bool = False) -> list[tuple[int, str]]:
    """Replace `lost` in every fragment of a CLOSED ledger. Returns [(fragment index, new bookie)]."""
    meta, version = context.ledgers.read(ledger)
    if not meta.is_closed:
        raise LedgerError(f"ledger {ledger} is {meta.state.value}: recover it before re-replicating")
    done: list[tuple[int, str]] = []
    for index in fragments_on(meta, lost):
        seg = meta.segments[index]
        new = context.placement.replacement(seg.bookies, context.pool.writable(exclude={lost}))
        if dry_run:
            done.append((index, new))
            continue
        _copy_fragment(context, meta, version, index, lost, new, password)
        meta, version = context.ledgers.update(ledger, lambda m: m.with_replaced_bookie(index, lost, new) if lost in m.segments[index].bookies else None)
        log.warning("fragment re-replicated ledger=%s fragment=%d lost=%s new=%s", ledger, index, lost, new)
        done.append((index, new))
    return done


def _copy_fragment(context: LedgerContext, meta: LedgerMetadata, version: int, index: int, lost: str, new: str,
                   password: bytes) -> None:
    seg = meta.segments[index]
    first, last = seg.first_entry_id, meta.segment_last_entry_id(index)
    if last is None or last < first:
        return
    slot = seg.bookies.index(lost)
    needed = [e for e in range(first, last + 1) if slot in write_set(e, meta.ensemble_size, meta.write_quorum_size)]
    if not needed:
        return
    reader = ReadHandle(context, meta, version, password)
    key = (meta.ledger_id.scope_id, meta.ledger_id.id)
    mk = master_key(password)
    from pyspark_ledger.protocol.entry_format import encode_entry

    target = context.pool.get(new)
    wanted = set(needed)
    batch: list[tuple[int, int, bytes]] = []
    for entry in reader.read_planned(needed[0], needed[-1]):
        if entry.entry_id not in wanted:
            continue
        data = encode_entry(reader._read_digest, key[0], key[1], entry.entry_id, entry.last_add_confirmed,  # noqa: SLF001
                            entry.length, entry.payload)
        batch.append((entry.entry_id, entry.last_add_confirmed, data))
        if len(batch) >= COPY_BATCH_ENTRIES:
            _write(target, key, mk, batch)
            batch = []
    if batch:
        _write(target, key, mk, batch)
    reader.close()


def _write(target, key: tuple[int, int], mk: bytes, batch: list[tuple[int, int, bytes]]) -> None:  # type: ignore[no-untyped-def]
    done = threading.Event()
    result: list[tuple[Status, str]] = []

    def cb(status: Status, message: str) -> None:
        result.append((status, message))
        done.set()

    target.add_batch(key, mk, batch, cb, recovery=True, timeout_s=COPY_TIMEOUT_S)
    if not done.wait(COPY_TIMEOUT_S + 5) or result[0][0] != Status.OK:
        detail = result[0] if result else "timeout"
        raise LedgerError(f"copying entries to bookie {target.bookie_id} failed: {detail}")
