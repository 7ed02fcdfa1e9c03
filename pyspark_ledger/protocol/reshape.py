"""Expand and contract a CLOSED ledger: new E, W, A and per-fragment ensembles (pure).

Expand raises the write quorum (more copies of every entry) and may widen each fragment's
ensemble with new bookies; contract lowers them, removing named bookies from every fragment
(Oxia's expand and contract of a replica set, on BookKeeper's striping). Every entry's write set
is recomputed from the new shape, so an entry needs a copy on each bookie of its new write set
that its old write set did not have: `copies_for` says which, and from where.

The change is made safe by its executor (autorecovery/reshape.py): copy first, then one
compare-and-set of the metadata at the version the plan was made from, so the metadata never
names a bookie for an entry it does not hold.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from metadata.ledger import LedgerMetadata, Segment  # the modules, not the package that re-exports the stores
from metadata.quorum import write_set
from pyspark_ledger.errors import PySparkLedgerError

# (ensemble, candidates) -> a bookie outside the ensemble (protocol/placement.py replacement)
PickBookie = Callable[[Sequence[str], Sequence[str]], str]
ENSEMBLE_SIZE_MAX = 64  # as at ledger creation: a wider stripe is a mistake, not a plan


class ReshapeError(PySparkLedgerError, ValueError):
    """The requested shape is impossible for this ledger (names what and why)."""


@dataclass(frozen=True, slots=True)
class ReshapePlan:
    ensemble_size: int
    write_quorum_size: int
    ack_quorum_size: int
    ensembles: tuple[tuple[str, ...], ...]  # one per fragment, in order
    leaving: tuple[str, ...]  # bookies the ledger no longer names at all (their copies can go)

    def applied_to(self, meta: LedgerMetadata) -> LedgerMetadata:
        segments = tuple(Segment(seg.first_entry_id, ensemble) for seg, ensemble in zip(meta.segments, self.ensembles))
        return dataclasses.replace(meta, ensemble_size=self.ensemble_size, write_quorum_size=self.write_quorum_size,
                                   ack_quorum_size=self.ack_quorum_size, segments=segments)

    def matches(self, meta: LedgerMetadata) -> bool:
        """The ledger already has this shape (the change was committed)."""
        return ((meta.ensemble_size, meta.write_quorum_size, meta.ack_quorum_size)
                == (self.ensemble_size, self.write_quorum_size, self.ack_quorum_size)
                and tuple(seg.bookies for seg in meta.segments) == self.ensembles)


def plan_reshape(meta: LedgerMetadata, *, ensemble_size: int, write_quorum_size: int, ack_quorum_size: int,
                 remove: Collection[str], candidates: Sequence[str], pick: PickBookie) -> ReshapePlan:
    """The new shape: each fragment keeps its bookies minus `remove`, in order, then gains picks
    from `candidates` up to `ensemble_size`. Raises ReshapeError for an impossible request."""
    if not meta.is_closed:
        raise ReshapeError(f"ledger {meta.ledger_id} is {meta.state.value}: only a CLOSED ledger can be expanded or "
                           "contracted (recover it first)")
    if not 1 <= ack_quorum_size <= write_quorum_size <= ensemble_size <= ENSEMBLE_SIZE_MAX:
        raise ReshapeError(f"need 1 <= A <= W <= E <= {ENSEMBLE_SIZE_MAX}, got E={ensemble_size} "
                           f"W={write_quorum_size} A={ack_quorum_size}")
    unknown = sorted(set(remove) - meta.bookies())
    if unknown:
        raise ReshapeError(f"ledger {meta.ledger_id} has no copies on {unknown}: nothing to remove there")
    ensembles = []
    for index, seg in enumerate(meta.segments):
        kept = [b for b in seg.bookies if b not in remove]
        if len(kept) > ensemble_size:
            raise ReshapeError(f"fragment {index} keeps {len(kept)} bookies {kept}, more than E={ensemble_size}: "
                               "name the bookies to remove")
        free = [c for c in candidates if c not in kept and c not in remove]
        if len(kept) + len(free) < ensemble_size:
            raise ReshapeError(f"fragment {index} needs E={ensemble_size} bookies: it keeps {len(kept)} and only "
                               f"{len(free)} other writable bookie(s) are available")
        while len(kept) < ensemble_size:
            kept.append(pick(kept, [c for c in free if c not in kept]))
        ensembles.append(tuple(kept))
    still = {b for e in ensembles for b in e}
    return ReshapePlan(ensemble_size, write_quorum_size, ack_quorum_size, tuple(ensembles),
                       tuple(sorted(meta.bookies() - still)))


def copies_for(meta: LedgerMetadata, plan: ReshapePlan, entry_id: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(sources, targets) of one entry: the bookies of its old write set (those being removed
    last), and the bookies of its new write set that the old one did not include."""
    index = meta.segment_index_for(entry_id)
    old_ensemble = meta.segments[index].bookies
    old = [old_ensemble[s] for s in write_set(entry_id, meta.ensemble_size, meta.write_quorum_size)]
    new_ensemble = plan.ensembles[index]
    new = [new_ensemble[s] for s in write_set(entry_id, plan.ensemble_size, plan.write_quorum_size)]
    leaving = set(plan.leaving)
    sources = tuple(sorted(old, key=lambda b: b in leaving))
    return sources, tuple(b for b in new if b not in old)
