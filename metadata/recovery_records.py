"""Which bookies the autorecovery records of a ledger name, read straight from their nodes.

The records belong to the client's autorecovery (pyspark_ledger/autorecovery/swap_record.py,
reshape.py), which writes and resumes them. A bookie's garbage collector only needs to know
whether a record in flight names it (it must then keep its copy of the ledger, bookie/storage/gc.py),
and a bookie never imports the client: this is that minimal reading, of the same JSON.

    /autorecovery/swaps/<ledger>/<fragment>_<lost bookie>   {"lost": ..., "new": ..., ...}
    /autorecovery/reshapes/<ledger>                         {"ensembles": [[...], ...], "leaving": [...], ...}

A record that cannot be read names every bookie (None): unknown is never "not named".
"""

from __future__ import annotations

import json

from metadata.ids import LedgerId
from metadata.paths import ledger_reshape_path, ledger_swaps_path
from metadata.store import MetadataStore

SWAP_RECORDS_READ_MAX = 1024  # a ledger has one record per (fragment, lost bookie): far fewer


def swap_record_bookies(data: bytes) -> frozenset[str] | None:
    """The bookies a replica-swap record names (the lost one and its replacement), or None."""
    try:
        d = json.loads(data)
        return frozenset((str(d["lost"]), str(d["new"])))
    except (ValueError, KeyError, TypeError):
        return None


def reshape_record_bookies(data: bytes) -> frozenset[str] | None:
    """The bookies a reshape record names (its new ensembles and the bookies leaving), or None."""
    try:
        d = json.loads(data)
        named = {str(b) for ensemble in d["ensembles"] for b in ensemble}
        return frozenset(named | {str(b) for b in d["leaving"]})
    except (ValueError, KeyError, TypeError):
        return None


def bookies_named_in_flight(store: MetadataStore, lid: LedgerId) -> frozenset[str] | None:
    """Every bookie a swap or reshape record of `lid` names; None when a record cannot be read
    (then every bookie counts as named). Store errors propagate: the caller keeps its copy."""
    named: set[str] = set()
    swaps = ledger_swaps_path(lid)
    for name in store.children(swaps)[:SWAP_RECORDS_READ_MAX]:
        got = store.get(f"{swaps}/{name}")
        if got is None:
            continue  # finished meanwhile
        bookies = swap_record_bookies(got.value)
        if bookies is None:
            return None
        named |= bookies | {name.partition("_")[2]}  # the node's own name holds the lost bookie
    got = store.get(ledger_reshape_path(lid))
    if got is not None:
        bookies = reshape_record_bookies(got.value)
        if bookies is None:
            return None
        named |= bookies
    return frozenset(named)
