"""LedgerManager: typed access to ledger metadata over any MetadataStore.

Every change is a compare-and-set on the stored version; `update` is the standard CAS loop
(read, apply a pure function, write, re-read on conflict), bounded by a RetryPolicy.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

from metadata import serde
from metadata.errors import NodeExistsError, NoNodeError, NoSuchLedgerError
from metadata.ids import U64_MAX, LedgerId, LedgerIdLike
from metadata.ledger import LedgerMetadata
from metadata.paths import LEDGER_PATH_LEVELS, LEDGERS, SCOPE_PATH_LEVELS, ledger_id_from_path, ledger_path, scope_path
from metadata.store import MetadataStore, RetryPolicy, Versioned, Watch, cas_update

LEDGER_ID_COUNTER = "ledgers"


class LedgerManager:
    def __init__(self, store: MetadataStore, retry: RetryPolicy | None = None):
        self.store = store
        self.retry = retry or RetryPolicy()

    def allocate_ledger_id(self, scope_id: int | None = 0) -> LedgerId:
        """Scope 0: the next id from the store's allocator (unique, never reused).
        Another scope: a random 64-bit id in that scope (no coordination; create() detects the
        astronomically rare collision). None: a random UUID split in two halves."""
        if scope_id is None:
            return LedgerId.random_scoped()
        if scope_id == 0:
            return LedgerId(0, self.store.allocate_id(LEDGER_ID_COUNTER))
        return LedgerId(scope_id, random.getrandbits(64) & U64_MAX)

    def create(self, meta: LedgerMetadata) -> int:
        try:
            return self.store.create(ledger_path(meta.ledger_id), serde.encode(meta))
        except NodeExistsError:
            raise NodeExistsError(f"ledger {meta.ledger_id} already exists") from None

    def read(self, ledger: LedgerIdLike) -> tuple[LedgerMetadata, int]:
        lid = LedgerId.parse(ledger)
        got = self.store.get(ledger_path(lid))
        if got is None:
            raise NoSuchLedgerError(f"no such ledger {lid} ({lid.qualified_name})")
        return serde.decode(got.value, lid), got.version

    def get(self, ledger: LedgerIdLike) -> tuple[LedgerMetadata, int] | None:
        try:
            return self.read(ledger)
        except NoSuchLedgerError:
            return None

    def compare_and_set(self, meta: LedgerMetadata, expected_version: int) -> int:
        try:
            return self.store.compare_and_set(ledger_path(meta.ledger_id), serde.encode(meta), expected_version)
        except NoNodeError:
            raise NoSuchLedgerError(f"no such ledger {meta.ledger_id}") from None

    def update(
        self, ledger: LedgerIdLike, change: Callable[[LedgerMetadata], LedgerMetadata | None]
    ) -> tuple[LedgerMetadata, int]:
        """Apply `change` by compare-and-set until it sticks. `change` returns the new value, or None
        when nothing needs writing (the current value is returned); it may raise to give up."""
        return cas_update(lambda: self.read(ledger), self.compare_and_set, change, self.retry)

    def delete(self, ledger: LedgerIdLike, expected_version: int | None = None) -> None:
        lid = LedgerId.parse(ledger)
        try:
            self.store.delete(ledger_path(lid), expected_version)
        except NoNodeError:
            raise NoSuchLedgerError(f"no such ledger {lid}") from None

    def scan(self, scope_id: int | None = None) -> Iterator[LedgerId]:
        """Every ledger id (of one scope, or of all), in id order, reading level by level."""
        if scope_id is None:
            paths = self.store.walk(LEDGERS, LEDGER_PATH_LEVELS)
        else:
            paths = self.store.walk(scope_path(scope_id), LEDGER_PATH_LEVELS - SCOPE_PATH_LEVELS)
        for p in paths:
            yield ledger_id_from_path(p)

    def watch(self, ledger: LedgerIdLike, callback: Callable[[LedgerMetadata | None, int], None]) -> Watch:
        lid = LedgerId.parse(ledger)

        def on_change(v: Versioned | None) -> None:
            if v is None:
                callback(None, -1)
            else:
                callback(serde.decode(v.value, lid), v.version)

        return self.store.watch(ledger_path(lid), on_change)
