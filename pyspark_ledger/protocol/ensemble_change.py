"""The ensemble-change decision (reference/bookkeeper-protocol.md, "Ensemble changes").

When bookies of the current fragment fail, the writer starts a new fragment at its first
unacknowledged entry, with each failed bookie replaced by a writable one outside the ensemble.
If no replacement exists but every write set can still reach A acks without the failed bookies,
the writer carries on without them (BookKeeper's delayed ensemble change); otherwise it stops.

`rebase_replacements` serves the concurrent case: two recoveries or re-replications that each
replace a bookie of one fragment must not overwrite each other's replacement, so a change is
always re-applied to the ensemble the metadata holds NOW, not the one read before the copy.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from pyspark_ledger.protocol.distribution import ack_quorum_reachable

# placement: (ensemble, candidates, the failed bookie) -> a replacement outside the ensemble, or None if there is none
PickReplacement = Callable[[Sequence[str], Sequence[str], str], "str | None"]


@dataclass(frozen=True, slots=True)
class EnsembleChangePlan:
    first_entry_id: int
    ensemble: tuple[str, ...]  # the ensemble from first_entry_id on (the current one if nothing was replaced)
    replaced: Mapping[str, str] = field(default_factory=dict)  # failed bookie -> its replacement
    unreplaced: tuple[str, ...] = ()  # failed bookies the writer carries on without
    error: str | None = None  # set when some write set can no longer reach the ack quorum

    @property
    def needs_metadata_change(self) -> bool:
        return bool(self.replaced)


def plan_ensemble_change(current: Sequence[str], failed: Collection[str], dead: Collection[str],
                         candidates: Sequence[str], pick: PickReplacement, *, write_quorum_size: int,
                         ack_quorum_size: int, first_entry_id: int) -> EnsembleChangePlan:
    """Decide the new fragment for the failures in `failed` (bookies outside `current` are
    ignored: an old fragment's bookie failing does not change where new entries go).
    `dead` are bookies the writer already carries on without."""
    failed_here = [b for b in current if b in failed]
    ensemble = list(current)
    exclude = set(current) | set(failed) | set(dead)
    replaced: dict[str, str] = {}
    for b in failed_here:
        repl = pick(ensemble, [c for c in candidates if c not in exclude], b)
        if repl is None:
            continue
        ensemble[ensemble.index(b)] = repl
        replaced[b] = repl
        exclude.add(repl)
    unreplaced = tuple(b for b in failed_here if b not in replaced)
    error = None
    if unreplaced and not ack_quorum_reachable(ensemble, write_quorum_size, ack_quorum_size, set(dead) | set(unreplaced)):
        error = (f"bookies {list(unreplaced)} failed, no replacement is available and some write sets can no "
                 f"longer reach the ack quorum {ack_quorum_size}")
    return EnsembleChangePlan(first_entry_id, tuple(ensemble), replaced, unreplaced, error)


def rebase_replacements(latest: Sequence[str], replaced: Mapping[str, str]) -> tuple[str, ...] | None:
    """Apply `replaced` (old -> new) to the ensemble the metadata holds now.

    A replacement applies only where its old bookie is still there and its new one is not yet in
    the ensemble (somebody else may have replaced the same bookie, or placed ours, meanwhile:
    theirs stands). Returns the new ensemble, or None if nothing applies any more."""
    ensemble = list(latest)
    changed = False
    for old, new in replaced.items():
        if old in ensemble and new not in ensemble:
            ensemble[ensemble.index(old)] = new
            changed = True
    return tuple(ensemble) if changed else None


Fragments = Sequence[tuple[int, Sequence[str]]]


def recovery_fragments(read: Fragments, replaced: Mapping[str, str], start: int) -> tuple[tuple[int, tuple[str, ...]], ...]:
    """The fragments a recovery replicates to and closes with: the ones it read at fencing, with
    its replacements (failed -> new) applied to the last fragment's ensemble from entry `start`
    on (never before that fragment's first entry).

    A recovery writes these only in its close CAS, once its entries reached A bookies of these
    write sets. Recorded earlier (an IN_RECOVERY ensemble change), a newcomer that does not yet
    hold the entries answers "no such entry", and a later recovery counts it toward W-A+1
    absent answers and truncates an acknowledged entry (simulator seed 44973)."""
    frags = [(first, tuple(ensemble)) for first, ensemble in read]
    last_first, last_ensemble = frags[-1]
    ensemble = rebase_replacements(last_ensemble, replaced)
    if ensemble is None:
        return tuple(frags)
    first = max(start, last_first)
    if first == last_first:
        frags[-1] = (first, ensemble)
    else:
        frags.append((first, ensemble))
    return tuple(frags)
