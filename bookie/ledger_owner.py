"""Whose key a bookie takes for a ledger it has not seen (issue 31, item 2; docs/security.md).

Storage keeps the master key of the first write (add, fence or WriteLac) of a ledger it has not
seen, and checks every later write against it (the reference protocol's trust on first write).
Ids in scope 0 are sequential, so trusting the first key let any client claim every future
ledger. Before storage sees such a first key, the bookie service asks here:

- the ledger must exist in metadata (read again after a `sync()` when the first read misses it:
  a ledger created through another ZooKeeper server is found);
- if its metadata holds a master-key verifier (metadata/key_verifier.py), the key must match it;
- a ledger created without one (before this change, by an older client, or with the cluster
  setting ledger_key_verifiers off) keeps the old behaviour: its first key is taken.

A refusal is UNAUTHORIZED with a message naming the reason; a store that cannot answer gives
BUSY ("retry"), never a guess. Verifiers are cached per ledger (bounded), and each (verifier,
key) check once per process (metadata/key_verifier.py), so a stranger repeating a refused key
costs a metadata read, not a key derivation. A ledger that is absent is not cached: its writer
may create it the next moment.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import NamedTuple

from bookie.status import Status
from metadata import key_verifier
from metadata.errors import MetadataError
from metadata.ids import LedgerId
from metadata.ledgers import LedgerManager
from metadata.paths import ledger_path
from metadata.store import MetadataStore

log = logging.getLogger(__name__)

VERIFIERS_CACHED_MAX = 65_536
_LEGACY = b""  # cached for a ledger whose metadata holds no verifier


class Verdict(NamedTuple):
    status: Status  # OK, UNAUTHORIZED or BUSY
    message: str


ACCEPTED = Verdict(Status.OK, "")


class LedgerOwners:
    """The check above, over the bookie's metadata store."""

    def __init__(self, store: MetadataStore, cache_max: int = VERIFIERS_CACHED_MAX):
        self._store = store
        self._ledgers = LedgerManager(store)
        self._cache_max = cache_max
        self._verifiers: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        self._lock = threading.Lock()

    def first_key_refusal(self, stored_key: bytes | None, ledger: tuple[int, int], master_key: bytes,
                          op: str) -> Verdict | None:
        """Why `master_key` may not become `ledger`'s key, or None: storage already keeps a key
        (`stored_key`; it checks every later write against it itself) or metadata accepts it.
        The one entry point of every first write (add, fence, WriteLac)."""
        if stored_key is not None:
            return None
        verdict = self.check(ledger, master_key, op)
        return None if verdict.status == Status.OK else verdict

    def check(self, ledger: tuple[int, int], master_key: bytes, op: str) -> Verdict:
        """May `master_key` become the key of `ledger`, which storage has no key for yet?"""
        name = f"{ledger[0]}:{ledger[1]}"
        try:
            verifier = self._verifier(ledger)
        except MetadataError as exc:
            log.info("ledger key not checked: metadata unavailable ledger=%s op=%s error=%s", name, op, exc)
            return Verdict(Status.BUSY, f"{op} for ledger {name}: its metadata cannot be read to check the key "
                                        f"({type(exc).__name__}); retry")
        if verifier is None:
            return Verdict(Status.UNAUTHORIZED, f"{op} refused for ledger {name}: no such ledger in metadata "
                                                "(a ledger is created in metadata before its first write)")
        if verifier == _LEGACY:
            return ACCEPTED  # created without a verifier: trust on first write, as before
        try:
            matched = key_verifier.key_matches(verifier, master_key)
        except key_verifier.UnknownKeyVerifierError as exc:
            return Verdict(Status.UNAUTHORIZED, f"{op} refused for ledger {name}: {exc}")
        if not matched:
            return Verdict(Status.UNAUTHORIZED, f"{op} refused for ledger {name}: wrong master key (password): "
                                                "it does not match the verifier in the ledger's metadata")
        return ACCEPTED

    def _verifier(self, ledger: tuple[int, int]) -> bytes | None:
        """The ledger's verifier, _LEGACY for none, None when the ledger is not in metadata."""
        with self._lock:
            cached = self._verifiers.get(ledger)
            if cached is not None:
                self._verifiers.move_to_end(ledger)
                return cached
        lid = LedgerId(*ledger)
        got = self._ledgers.get(lid)
        if got is None:
            self._store.sync(ledger_path(lid))
            got = self._ledgers.get(lid)
            if got is None:
                return None
        verifier = bytes(got[0].custom.get(key_verifier.KEY, _LEGACY))
        with self._lock:
            self._verifiers[ledger] = verifier
            while len(self._verifiers) > self._cache_max:
                self._verifiers.popitem(last=False)
        return verifier
