"""Wires a bookie's garbage collector (bookie/storage/gc.py) to the metadata store: one ledger
lookup per local ledger through LedgerManager, a `sync()` before any "no such ledger" counts,
the highest scope-0 id metadata knows of, and the autorecovery records in flight."""

from __future__ import annotations

from bookie.config import BookieConfig
from bookie.storage.engine_types import LedgerKey
from bookie.storage.gc import (
    GarbageCollector,
    GcSettings,
    GcStorage,
    HighestId,
    InFlightBookies,
    LedgerFacts,
    LedgerLookup,
)
from metadata.context import now_ms
from metadata.ids import LedgerId
from metadata.ledgers import LEDGER_ID_COUNTER, LedgerManager
from metadata.offload_record import offload_record
from metadata.paths import (
    LEDGER_PATH_LEVELS,
    LEDGERS,
    SCOPE_PATH_LEVELS,
    counter_path,
    ledger_id_from_path,
    ledger_path,
    scope_path,
)
from metadata.recovery_records import bookies_named_in_flight
from metadata.store import MetadataStore, join


def metadata_lookup(store: MetadataStore) -> LedgerLookup:
    """A LedgerLookup over the store. LedgerManager.get returns None only for "no such node";
    every other failure raises, and GC then leaves the ledger alone. A miss counts only once a
    sync and a second read agree (a ZooKeeper server may lag behind the one the ledger was
    created through)."""
    ledgers = LedgerManager(store)

    def lookup(ledger: LedgerKey) -> LedgerFacts:
        got = ledgers.get(ledger)
        if got is None:
            store.sync(ledger_path(LedgerId(*ledger)))
            got = ledgers.get(ledger)
            if got is None:
                return LedgerFacts(exists=False)
        meta, _ = got
        if not meta.is_closed:
            return LedgerFacts(True)
        offload = offload_record(meta)
        deletable = offload is not None and offload.bookie_copies_deletable(now_ms())
        return LedgerFacts(True, meta.last_entry_id, frozenset(meta.bookies()), deletable)

    return lookup


def highest_ledger_id(store: MetadataStore) -> HighestId:
    """After a sync: the larger of the scope-0 id counter (a ZooKeeper node; the embedded store
    keeps its counters elsewhere) and the newest scope-0 ledger (the last child at each level)."""

    def highest() -> int:
        store.sync(LEDGERS)
        counter = store.get(counter_path(LEDGER_ID_COUNTER))
        best = int(counter.value) if counter is not None and counter.value.strip().isdigit() else -1
        path = scope_path(0)
        for _ in range(LEDGER_PATH_LEVELS - SCOPE_PATH_LEVELS):  # bounded: one child per level
            names = store.children(path)
            if not names:
                return best
            path = join(path, names[-1])
        return max(best, ledger_id_from_path(path).id)

    return highest


def records_in_flight(store: MetadataStore) -> InFlightBookies:
    return lambda ledger: bookies_named_in_flight(store, LedgerId(*ledger))


def start_gc(storage: GcStorage, store: MetadataStore, cfg: BookieConfig, bookie_id: str | None = None) -> GarbageCollector:
    settings = GcSettings(
        interval_s=cfg.gc_interval_s,
        over_replicated_grace_s=cfg.gc_over_replicated_grace_s,
        minor_compaction_threshold=cfg.minor_compaction_threshold,
        major_compaction_threshold=cfg.major_compaction_threshold,
        minor_compaction_interval_s=cfg.minor_compaction_interval_s,
        major_compaction_interval_s=cfg.major_compaction_interval_s,
        compaction_rate_bytes_s=cfg.compaction_rate_mb_s * 2**20,
    )
    gc = GarbageCollector(storage, metadata_lookup(store), settings, bookie_id=bookie_id,
                          highest_id=highest_ledger_id(store), in_flight=records_in_flight(store))
    storage.attach_gc(gc)
    gc.start()
    return gc
