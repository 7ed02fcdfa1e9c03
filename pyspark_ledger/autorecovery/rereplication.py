"""Re-replication: copy the fragments a lost bookie held to a replacement, then swap it in metadata.

Copy first, then compare-and-set the ensemble: a crash in between leaves only an unreferenced copy
on the new bookie (garbage, never a hole). Only sealed (CLOSED) ledgers are re-replicated; open
ones must be recovered first, which is what `ledger recover --bookie` does.

Copies are raw_copy's: the stored bytes of each entry, read from a surviving replica in runs,
checked once and forwarded in batches bounded in entries and bytes (a bookie refuses a batch over
its pending-add limit, 64 MiB by default: MiB-sized Arrow entries made 1,000-entry batches fail),
several batches in flight, paced by a CopyPace the caller shares between its copies. The swap is
re-applied to the ensemble the metadata holds when the compare-and-set runs (rebase_replacements):
a concurrent re-replication of the same fragment may have replaced the same bookie (theirs
stands), or placed our replacement bookie in another slot (then this one picks another and
copies again, a bounded number of times).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bookie.status import Status
from metadata import LedgerId, LedgerMetadata, write_set
from pyspark_ledger.autorecovery.copy_pace import CopyPace
from pyspark_ledger.autorecovery.raw_copy import FragmentCopy, copy_fragment_raw
from pyspark_ledger.autorecovery.swap_record import (
    STEP_COMMITTED,
    STEP_COPIED,
    STEP_COPYING,
    STEP_PREPARED,
    SwapRecords,
    new_record,
)
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.ledger.context import LedgerContext
from pyspark_ledger.ledger.keys import Credentials, resolve_keys
from pyspark_ledger.protocol.ensemble_change import rebase_replacements
from pyspark_ledger.protocol.invariants import InvariantError
from pyspark_ledger.protocol.recovery_plan import REPLICATE_BATCH_ENTRIES_MAX
from pyspark_ledger.protocol.replica_swap import COMMITTED, FINISH, ROLL_BACK, decide_swap

if TYPE_CHECKING:
    from pyspark_ledger.transport.bookie_client import BookieClient

log = logging.getLogger(__name__)

COPY_TIMEOUT_S = 60.0
# Copies read the fragment in windows of about this many bytes: half a bookie's read answer cap
# (ledger/read_handle.py READ_CHUNK_BYTES_MAX, 8 MiB), so entry sizes around the average never
# make an answer come back byte-capped.
COPY_READ_WINDOW_BYTES = 4 * 2**20
# A fragment's replacement is chosen (and copied) again at most this many times when concurrent
# re-replications took the chosen bookie for another slot of the same fragment.
REPLACEMENT_ATTEMPTS_MAX = 3


def fragments_on(meta: LedgerMetadata, bookie_id: str) -> list[int]:
    return [i for i, seg in enumerate(meta.segments) if bookie_id in seg.bookies]


CopiedCallback = Callable[[int], None]  # called with the bytes of each batch copied
CopiesCallback = Callable[[int], None]  # called with the entries of each batch copied
StepCallback = Callable[[str], None]  # called after each step of a swap (swap_record.SWAP_STEPS)


def rereplicate(context: LedgerContext, ledger: LedgerId, lost: str, credentials: Credentials = b"", *,
                dry_run: bool = False,
                on_copied: CopiedCallback | None = None, on_step: StepCallback | None = None,
                holder: str = "", resume_swaps: bool = False, pace: CopyPace | None = None,
                on_copies: CopiesCallback | None = None) -> list[tuple[int, str]]:
    """Replace `lost` in every fragment of a CLOSED ledger. Returns [(fragment index, the bookie
    that holds the fragment's copy now)]: ours, or a concurrent re-replication's.
    resume_swaps: finish a swap a predecessor prepared (swap_record) instead of choosing anew;
    for callers holding the ledger's replication claim (workers), whose predecessor is dead.
    credentials: the ledger's password, or an operator's keys (ledger/keys.py operator_keys).
    pace: the bytes-per-second bucket this copy shares (copy_pace); on_copies: called with the
    entries of each batch copied."""
    meta, _ = context.ledgers.read(ledger)
    if not meta.is_closed:
        raise LedgerError(f"ledger {ledger} is {meta.state.value}: recover it before re-replicating")
    done: list[tuple[int, str]] = []
    for index in fragments_on(meta, lost):
        if dry_run:
            seg = meta.segments[index]
            done.append((index, context.placement.replacement(seg.bookies, context.pool.writable(exclude={lost}),
                                                              failed=lost, write_quorum_size=meta.write_quorum_size)))
            continue
        run = _Run(credentials, on_copied, on_step or (lambda _step: None), holder, resume_swaps, pace, on_copies)
        now_holding = _rereplicate_fragment(context, ledger, index, lost, run)
        if now_holding is not None:
            done.append((index, now_holding))
    return done


@dataclass(frozen=True, slots=True)
class _Run:
    credentials: Credentials
    on_copied: CopiedCallback | None
    on_step: StepCallback
    holder: str
    resume_swaps: bool
    pace: CopyPace | None
    on_copies: CopiesCallback | None


def _rereplicate_fragment(context: LedgerContext, ledger: LedgerId, index: int, lost: str, run: _Run) -> str | None:
    """Copy fragment `index` off `lost` and swap the copy in, as a two-phase change
    (swap_record): prepare, copy, commit, clean up. Returns the bookie in `lost`'s slot
    afterwards (None if the fragment no longer names `lost` when this starts)."""
    swaps = SwapRecords(context.ledgers.store)
    for _ in range(REPLACEMENT_ATTEMPTS_MAX):
        meta, version = context.ledgers.read(ledger)
        before = meta.segments[index].bookies
        new = _prepare(context, swaps, ledger, index, lost, before, meta.write_quorum_size, run)
        if new is None:
            return None  # committed before (perhaps by a worker that died then): the record is gone
        slot = before.index(lost)
        run.on_step(STEP_PREPARED)
        _copy_fragment(context, meta, index, lost, new, run.credentials, run,
                       _first_batch_step(run.on_copied, run.on_step))
        run.on_step(STEP_COPIED)

        def change(m: LedgerMetadata, new: str = new) -> LedgerMetadata | None:  # bound: called in this iteration
            if rebase_replacements(m.segments[index].bookies, {lost: new}) is None:
                return None  # replaced by someone else, or our bookie took another slot meanwhile
            return m.with_replaced_bookie(index, lost, new)

        meta, _ = context.ledgers.update(ledger, change)  # the commit
        now = meta.segments[index].bookies
        if lost not in now:
            run.on_step(STEP_COMMITTED)
            swaps.done(ledger, index, lost)
            now_holding = now[slot]  # a replacement keeps the slot (with_replaced_bookie)
            if now_holding == new:
                log.info("fragment re-replicated ledger=%s fragment=%d lost=%s new=%s", ledger, index, lost, new)
            else:
                log.info("a concurrent re-replication replaced the bookie first; its copy stands "
                            "ledger=%s fragment=%d lost=%s theirs=%s ours_unused=%s", ledger, index, lost,
                            now_holding, new)
            return now_holding
        log.info("the chosen replacement joined the fragment in another slot meanwhile; choosing again "
                    "ledger=%s fragment=%d lost=%s taken=%s", ledger, index, lost, new)
    raise LedgerError(f"ledger {ledger} fragment {index}: no replacement for {lost} stuck after "
                      f"{REPLACEMENT_ATTEMPTS_MAX} attempts (concurrent re-replications kept taking them)")


def _prepare(context: LedgerContext, swaps: SwapRecords, ledger: LedgerId, index: int, lost: str,
             before: tuple[str, ...], write_quorum_size: int, run: _Run) -> str | None:
    """The replacement: a predecessor's prepared one when it can still be finished, else a new
    choice recorded before any copy (which rolls the predecessor's change back); None when the
    fragment no longer names `lost` (the record, if any, is deleted). The decision is
    replica_swap.decide_swap, the rule the simulator runs too."""
    writable = context.pool.writable(exclude={lost})
    got = swaps.get(ledger, index, lost)
    decision = decide_swap(before, lost, got is not None, got[0].new if got is not None and got[0] else None,
                           writable, resume_swaps=run.resume_swaps)
    if decision.action == COMMITTED:
        swaps.done(ledger, index, lost)
        return None
    if decision.action == FINISH and decision.new is not None and got is not None and got[0] is not None:
        log.info("finishing a replica swap a predecessor prepared ledger=%s fragment=%d lost=%s new=%s by=%s",
                    ledger, index, lost, decision.new, got[0].holder)
        return decision.new
    if decision.action == ROLL_BACK:
        log.warning("rolling back a replica swap whose replacement is gone or taken ledger=%s fragment=%d lost=%s "
                    "new=%s", ledger, index, lost, got[0].new if got is not None and got[0] else "(unreadable)")
    new = context.placement.replacement(before, writable, failed=lost, write_quorum_size=write_quorum_size)
    swaps.prepare(new_record(ledger, index, lost, new, run.holder), None if got is None else got[1])
    return new


def _first_batch_step(on_copied: CopiedCallback | None, on_step: StepCallback) -> CopiedCallback:
    first = [True]

    def copied(n: int) -> None:
        if on_copied is not None:
            on_copied(n)
        if first[0]:
            first[0] = False
            on_step(STEP_COPYING)

    return copied


def _copy_fragment(context: LedgerContext, meta: LedgerMetadata, index: int, lost: str, new: str,
                   credentials: Credentials, run: _Run, on_copied: CopiedCallback) -> None:
    """Copy the entries of fragment `index` that `lost` held to `new` (raw_copy: stored bytes in
    batches, several in flight, paced)."""
    seg = meta.segments[index]
    first, last = seg.first_entry_id, meta.segment_last_entry_id(index)
    if last is None or last < first:
        return
    slot = seg.bookies.index(lost)
    needed = [e for e in range(first, last + 1) if slot in write_set(e, meta.ensemble_size, meta.write_quorum_size)]
    if not needed:
        return
    keys = resolve_keys(meta, credentials)

    def copied(entries: int, n_bytes: int) -> None:
        on_copied(n_bytes)
        if run.on_copies is not None:
            run.on_copies(entries)

    copy_fragment_raw(context, FragmentCopy(meta, index, lost, needed), new, keys,
                      read_windows(meta, needed[0], needed[-1]), run.pace, copied)


def read_windows(meta: LedgerMetadata, first: int, last: int) -> Iterator[tuple[int, int]]:
    """first..last in windows of about COPY_READ_WINDOW_BYTES, from the ledger's average entry size.
    Why: a read answer is capped in bytes, and when the first replica of a range is the lost
    bookie, a read handle asked for a long range of MiB entries gets only capped answers from
    the others and gives up on entries past the caps (see the report on ReadHandle._read_chunk)."""
    if meta.last_entry_id is None or meta.length_bytes is None:  # both set exactly when CLOSED
        raise InvariantError(f"ledger {meta.ledger_id}: copy windows are planned over a closed ledger")
    count = meta.last_entry_id + 1
    average_bytes = max(1, meta.length_bytes // max(count, 1))
    per_window = max(1, min(REPLICATE_BATCH_ENTRIES_MAX, COPY_READ_WINDOW_BYTES // average_bytes))
    for start in range(first, last + 1, per_window):
        yield start, min(last, start + per_window - 1)


def write_copies(target: BookieClient, key: tuple[int, int], mk: bytes, batch: list[tuple[int, int, bytes]]) -> None:
    done = threading.Event()
    result: list[tuple[Status, str]] = []

    def cb(status: Status, message: str) -> None:
        result.append((status, message))
        done.set()

    target.add_batch(key, mk, batch, cb, recovery=True, timeout_s=COPY_TIMEOUT_S)
    if not done.wait(COPY_TIMEOUT_S + 5) or result[0][0] != Status.OK:
        detail = result[0] if result else "timeout"
        raise LedgerError(f"copying entries {batch[0][0]}..{batch[-1][0]} to bookie {target.bookie_id} failed: {detail}")
