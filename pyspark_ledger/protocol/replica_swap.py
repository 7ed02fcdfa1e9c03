"""What a re-replication does with one fragment's replica swap (issue 20, item 2; swap_record).

A swap of a lost bookie in one fragment goes prepare (a swap record names the replacement) ->
copy -> commit (compare-and-set of the ensemble, re-based with rebase_replacements) -> clean up
(the record is deleted). A worker that takes the fragment on reads the fragment as the metadata
holds it now and the record a predecessor may have left, and decides (pure: values in, one
decision out, so the replication worker and the simulator run the same rule):

- COMMITTED: the fragment no longer names the lost bookie (a predecessor committed, perhaps
  dying before its clean-up): only the record, if any, is deleted;
- FINISH: a predecessor's record names a replacement that is still writable and not in the
  fragment, and this worker resumes swaps (it holds the ledger's claim, so the predecessor is
  dead): copy to that same bookie again (recovery adds are idempotent) and commit;
- ROLL_BACK: a record exists but its replacement is gone, taken, or the record is unreadable:
  choose anew and replace the record (the old replacement's copy is unreferenced garbage, never
  a hole, because nothing was committed to it);
- START: no record, or a caller that does not resume swaps (`ledger recover --bookie`, whose
  other writer may be alive): choose anew and record the choice (over any record).
Safety never rests on the record: every commit is re-applied to the ensemble as it is then.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

COMMITTED = "committed"
FINISH = "finish"
ROLL_BACK = "roll back"
START = "start"

# The recorded replacement of an unreadable record (its bytes did not parse).
UNREADABLE = None


@dataclass(frozen=True, slots=True)
class SwapDecision:
    action: str  # COMMITTED, FINISH, ROLL_BACK or START
    new: str | None = None  # the replacement to finish with (FINISH only)

    @property
    def chooses_anew(self) -> bool:
        return self.action in (ROLL_BACK, START)


def decide_swap(fragment: Sequence[str], lost: str, has_record: bool, recorded_new: str | None,
                writable: Collection[str], *, resume_swaps: bool) -> SwapDecision:
    """The decision for replacing `lost` in `fragment` (its ensemble as the metadata holds it
    now). `has_record`: a swap record exists for (ledger, fragment, lost); `recorded_new`: the
    replacement it names (None if unreadable). `writable`: bookies a copy may go to now."""
    if lost not in fragment:
        return SwapDecision(COMMITTED)
    if not has_record:
        return SwapDecision(START)
    if not resume_swaps:
        return SwapDecision(START)
    if recorded_new is not None and recorded_new in writable and recorded_new not in fragment:
        return SwapDecision(FINISH, recorded_new)
    return SwapDecision(ROLL_BACK)
