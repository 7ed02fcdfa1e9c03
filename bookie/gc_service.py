"""Wires a bookie's garbage collector (bookie/storage/gc.py) to the metadata store: one
ledger lookup per local ledger through LedgerManager."""

from __future__ import annotations

from bookie.config import BookieConfig
from bookie.storage.engine_types import LedgerKey
from bookie.storage.gc import GarbageCollector, GcSettings, GcStorage, LedgerFacts, LedgerLookup
from metadata.ledgers import LedgerManager
from metadata.store import MetadataStore


def metadata_lookup(store: MetadataStore) -> LedgerLookup:
    """A LedgerLookup over the store. LedgerManager.get returns None only for "no such node";
    every other failure raises, and GC then leaves the ledger alone."""
    ledgers = LedgerManager(store)

    def lookup(ledger: LedgerKey) -> LedgerFacts:
        got = ledgers.get(ledger)
        if got is None:
            return LedgerFacts(exists=False)
        meta, _ = got
        return LedgerFacts(True, meta.last_entry_id if meta.is_closed else None)

    return lookup


def start_gc(storage: GcStorage, store: MetadataStore, cfg: BookieConfig) -> GarbageCollector:
    settings = GcSettings(
        interval_s=cfg.gc_interval_s,
        minor_compaction_threshold=cfg.minor_compaction_threshold,
        major_compaction_threshold=cfg.major_compaction_threshold,
        minor_compaction_interval_s=cfg.minor_compaction_interval_s,
        major_compaction_interval_s=cfg.major_compaction_interval_s,
        compaction_rate_bytes_s=cfg.compaction_rate_mb_s * 2**20,
    )
    gc = GarbageCollector(storage, metadata_lookup(store), settings)
    storage.attach_gc(gc)
    gc.start()
    return gc
