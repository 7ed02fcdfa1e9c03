"""Expand and contract a CLOSED ledger as a resumable two-phase change (issue 20, item 2).

    prepare   /autorecovery/reshapes/<ledger> = {the plan, the metadata version it was made from, holder}
    copy      each entry to the bookies of its new write set that lacked it (recovery adds: idempotent)
    commit    compare-and-set of the ledger's metadata at that version: new E, W, A and ensembles
    clean up  DeleteLedger as the operator on bookies the ledger no longer names; delete the record

The pure plan is protocol/reshape.py. Run the same command again after a crash at any step: a
record whose version still matches the metadata is finished (copied again, committed); a record
whose shape the metadata already has is only cleaned up; a record the metadata moved away from
(autorecovery replaced a bookie meanwhile) is rolled back (the record goes; what was copied is
unreferenced, never a hole) and the change is planned again from the metadata as it is now.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass

from metadata import LedgerId, LedgerMetadata
from metadata.context import now_ms
from metadata.errors import BadVersionError, NodeExistsError, NoNodeError
from metadata.paths import ledger_reshape_path
from metadata.store import MetadataStore
from pyspark_ledger.autorecovery.rereplication import read_windows, write_copies
from pyspark_ledger.autorecovery.swap_record import STEP_COMMITTED, STEP_COPIED, STEP_PREPARED
from pyspark_ledger.errors import LedgerError
from pyspark_ledger.ledger.context import LedgerContext
from pyspark_ledger.ledger.keys import Credentials, resolve_keys
from pyspark_ledger.ledger.read_handle import ReadHandle
from pyspark_ledger.protocol.digest import LedgerKeys
from pyspark_ledger.protocol.distribution import byte_bounded_chunks
from pyspark_ledger.protocol.entry_format import encode_copy
from pyspark_ledger.protocol.recovery_plan import REPLICATE_BATCH_BYTES_MAX, REPLICATE_BATCH_ENTRIES_MAX
from pyspark_ledger.protocol.reshape import ReshapeError, ReshapePlan, copies_for, plan_reshape

log = logging.getLogger(__name__)

CLEANUP_TIMEOUT_S = 30.0
StepCallback = Callable[[str], None]
CopiedCallback = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class ReshapeRecord:
    plan: ReshapePlan
    from_version: int
    holder: str
    since_ms: int

    def to_bytes(self) -> bytes:
        p = self.plan
        return json.dumps({"E": p.ensemble_size, "W": p.write_quorum_size, "A": p.ack_quorum_size,
                           "ensembles": [list(e) for e in p.ensembles], "leaving": list(p.leaving),
                           "fromVersion": self.from_version, "holder": self.holder, "sinceMs": self.since_ms},
                          sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> ReshapeRecord | None:
        try:
            d = json.loads(data)
            plan = ReshapePlan(int(d["E"]), int(d["W"]), int(d["A"]), tuple(tuple(e) for e in d["ensembles"]),
                               tuple(d["leaving"]))
            return cls(plan, int(d["fromVersion"]), str(d.get("holder", "")), int(d.get("sinceMs", 0)))
        except (ValueError, KeyError, TypeError):
            return None


def read_record(store: MetadataStore, lid: LedgerId) -> tuple[ReshapeRecord | None, int] | None:
    got = store.get(ledger_reshape_path(lid))
    return None if got is None else (ReshapeRecord.from_bytes(got.value), got.version)


def _write_record(store: MetadataStore, lid: LedgerId, record: ReshapeRecord) -> None:
    """Create the record, or replace one (a rolled-back predecessor's, dropped just before)."""
    path = ledger_reshape_path(lid)
    for _ in range(3):  # bounded: a concurrent reshape of one ledger is an operator's mistake
        got = store.get(path)
        try:
            if got is None:
                store.create(path, record.to_bytes())
            else:
                store.compare_and_set(path, record.to_bytes(), got.version)
            return
        except (NodeExistsError, BadVersionError, NoNodeError):
            continue
    raise ReshapeError(f"ledger {lid} is being reshaped by someone else right now: try again later")


def _drop_record(store: MetadataStore, lid: LedgerId) -> None:
    try:
        store.delete(ledger_reshape_path(lid))
    except NoNodeError:
        pass


def reshape(context: LedgerContext, lid: LedgerId, *, ensemble_size: int, write_quorum_size: int,
            ack_quorum_size: int, remove: Collection[str] = (), credentials: Credentials = b"", holder: str = "",
            on_step: StepCallback | None = None, on_copied: CopiedCallback | None = None) -> ReshapePlan:
    """Give a CLOSED ledger the shape asked for (or finish a predecessor's change to it).
    Returns the plan now in the metadata. Raises ReshapeError for an impossible shape."""
    step = on_step or (lambda _s: None)
    store = context.ledgers.store
    meta, version = context.ledgers.read(lid)
    plan = _resume_or_plan(context, meta, version, ensemble_size, write_quorum_size, ack_quorum_size, remove)
    if plan is None:  # a predecessor committed this very change: only its clean-up was left
        got = read_record(store, lid)
        done = got[0].plan if got and got[0] else _current_plan(meta)
        _clean_up(context, meta, done, credentials)
        return done
    if not plan.matches(meta):
        _write_record(store, lid, ReshapeRecord(plan, version, holder, now_ms()))
        step(STEP_PREPARED)
        keys = resolve_keys(meta, credentials)
        _copy(context, meta, version, plan, keys, on_copied)
        step(STEP_COPIED)
        try:
            context.ledgers.compare_and_set(plan.applied_to(meta), version)
        except BadVersionError:
            _drop_record(store, lid)  # rolled back: the copies made are unreferenced, never a hole
            raise ReshapeError(f"ledger {lid} changed while it was being reshaped (autorecovery?): run again") from None
        step(STEP_COMMITTED)
        log.info("ledger reshaped ledger=%s E=%d W=%d A=%d leaving=%s", lid, plan.ensemble_size,
                 plan.write_quorum_size, plan.ack_quorum_size, ",".join(plan.leaving))
        meta, version = context.ledgers.read(lid)
    _clean_up(context, meta, plan, credentials)
    return plan


def _current_plan(meta: LedgerMetadata) -> ReshapePlan:
    return ReshapePlan(meta.ensemble_size, meta.write_quorum_size, meta.ack_quorum_size,
                       tuple(seg.bookies for seg in meta.segments), ())


def _resume_or_plan(context: LedgerContext, meta: LedgerMetadata, version: int, e: int, w: int, a: int,
                    remove: Collection[str]) -> ReshapePlan | None:
    """A predecessor's plan to finish, None when it was committed, else a new plan."""
    store = context.ledgers.store
    got = read_record(store, meta.ledger_id)
    if got is not None:
        record = got[0]
        if record is not None and record.plan.matches(meta):
            return None
        same_request = record is not None and (record.plan.ensemble_size, record.plan.write_quorum_size,
                                               record.plan.ack_quorum_size) == (e, w, a)
        if record is not None and record.from_version == version and same_request:
            log.info("finishing a reshape left by %s ledger=%s", record.holder or "a predecessor", meta.ledger_id)
            return record.plan
        log.warning("rolling back a reshape the metadata moved away from ledger=%s", meta.ledger_id)
        _drop_record(store, meta.ledger_id)
    return plan_reshape(meta, ensemble_size=e, write_quorum_size=w, ack_quorum_size=a, remove=remove,
                        candidates=context.pool.writable(exclude=set(remove)), pick=context.placement.replacement)


def _copy(context: LedgerContext, meta: LedgerMetadata, version: int, plan: ReshapePlan, keys: LedgerKeys,
          on_copied: CopiedCallback | None) -> None:
    """Every entry to the new write-set members that lack it, in bounded batches per bookie."""
    last = meta.last_entry_id if meta.last_entry_id is not None else -1
    if last < 0:
        return
    key = (meta.ledger_id.scope_id, meta.ledger_id.id)
    reader = ReadHandle(context, meta, version, keys)
    try:
        for first_id, last_id in read_windows(meta, 0, last):
            per_bookie: dict[str, list[tuple[int, int, bytes]]] = {}
            for entry in reader.read_planned(first_id, last_id):
                targets = copies_for(meta, plan, entry.entry_id)[1]
                if targets:
                    data = encode_copy(keys.digest, key[0], key[1], entry)
                    for b in targets:
                        per_bookie.setdefault(b, []).append((entry.entry_id, entry.last_add_confirmed, data))
            for bookie_id, items in sorted(per_bookie.items()):
                for batch in _batches(items):
                    write_copies(context.pool.get(bookie_id), key, keys.master_key, batch)
                    if on_copied is not None:
                        on_copied(sum(len(item[2]) for item in batch))
    finally:
        reader.close()


def _batches(items: list[tuple[int, int, bytes]]) -> Iterator[list[tuple[int, int, bytes]]]:
    return iter(byte_bounded_chunks(items, lambda item: len(item[2]), REPLICATE_BATCH_ENTRIES_MAX,
                                    REPLICATE_BATCH_BYTES_MAX))


def _clean_up(context: LedgerContext, meta: LedgerMetadata, plan: ReshapePlan, credentials: Credentials) -> None:
    """Drop the copies on bookies the ledger left (best effort: a bookie that is down keeps them
    until the ledger is deleted), then the record."""
    key = (meta.ledger_id.scope_id, meta.ledger_id.id)
    master_key = resolve_keys(meta, credentials).master_key  # keys pass through; a password is checked
    for bookie_id in plan.leaving:
        if bookie_id in meta.bookies():
            continue  # named again (a later change): keep
        try:
            context.pool.get(bookie_id).delete_ledger(key, CLEANUP_TIMEOUT_S, master_key=master_key)
        except LedgerError as exc:
            log.warning("could not drop the copies of a reshaped ledger on a bookie it left ledger=%s bookie=%s "
                        "error=%s", meta.ledger_id, bookie_id, exc)
    _drop_record(context.ledgers.store, meta.ledger_id)
