"""Quorum arithmetic for a ledger's ensemble size E, write quorum W and ack quorum A.

Pure functions, no I/O. The names follow reference/tigerbeetle-vsr-protocols.md: the replication
quorum is A (acks that make an add durable), the recovery quorum is W - A + 1 (answers per write
quorum that make fencing and "no such entry" conclusive). They intersect: A + (W - A + 1) = W + 1 > W,
so any recovery quorum shares at least one bookie with any replication quorum of the same write set.
"""

from __future__ import annotations

from dataclasses import dataclass

from metadata.errors import InvalidQuorumError

# A bound so that a typo (E=3000) is refused instead of planning an impossible ensemble.
ENSEMBLE_SIZE_MAX = 64


@dataclass(frozen=True, slots=True)
class QuorumConfig:
    ensemble_size: int
    write_quorum_size: int
    ack_quorum_size: int

    def __post_init__(self) -> None:
        validate_quorum(self.ensemble_size, self.write_quorum_size, self.ack_quorum_size)

    @property
    def replication_quorum(self) -> int:
        return self.ack_quorum_size

    @property
    def recovery_quorum(self) -> int:
        return self.write_quorum_size - self.ack_quorum_size + 1

    @property
    def quorum_intersection(self) -> int:
        """Bookies any replication quorum and any recovery quorum of one write set share (>= 1)."""
        return self.replication_quorum + self.recovery_quorum - self.write_quorum_size

    @property
    def distinct_write_sets(self) -> int:
        return self.ensemble_size

    @property
    def bookie_failures_tolerated_for_writes(self) -> int:
        """Bookies of a write set that may fail while adds still reach the ack quorum (without an ensemble change)."""
        return self.write_quorum_size - self.ack_quorum_size

    @property
    def bookie_failures_tolerated_for_reads(self) -> int:
        """Replicas of an acknowledged entry that may be lost while it stays readable."""
        return self.ack_quorum_size - 1

    def explain(self) -> list[tuple[str, str]]:
        """Rows for the admin shell's `quorums` table."""
        e, w, a = self.ensemble_size, self.write_quorum_size, self.ack_quorum_size
        return [
            ("ensemble size (E)", str(e)),
            ("write quorum (W)", str(w)),
            ("ack quorum (A)", str(a)),
            ("replication quorum", f"{self.replication_quorum} (A: acks before an add is acknowledged)"),
            ("recovery quorum",
             f"{self.recovery_quorum} (W-A+1: answers per write set to fence or to decide an entry is absent)"),
            ("quorum intersection", f"{self.quorum_intersection} (A + (W-A+1) - W)"),
            ("distinct write sets", f"{self.distinct_write_sets} (entry e goes to members e mod E .. e mod E + W-1)"),
            ("write failures tolerated",
             f"{self.bookie_failures_tolerated_for_writes} per write set before an ensemble change is needed"),
            ("replica losses tolerated", f"{self.bookie_failures_tolerated_for_reads} per acknowledged entry"),
        ]


def validate_quorum(ensemble_size: int, write_quorum_size: int, ack_quorum_size: int) -> None:
    values = {"ensemble size": ensemble_size, "write quorum": write_quorum_size, "ack quorum": ack_quorum_size}
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidQuorumError(f"{name} must be an integer, got {value!r}")
    if not ensemble_size >= write_quorum_size >= ack_quorum_size >= 1:
        raise InvalidQuorumError(
            f"invalid quorum E={ensemble_size} W={write_quorum_size} A={ack_quorum_size}: "
            "need ensemble size >= write quorum >= ack quorum >= 1"
        )
    if ensemble_size > ENSEMBLE_SIZE_MAX:
        raise InvalidQuorumError(f"ensemble size {ensemble_size} exceeds the maximum {ENSEMBLE_SIZE_MAX}")


def write_set(entry_id: int, ensemble_size: int, write_quorum_size: int) -> list[int]:
    """Indexes into the ensemble of the bookies that store entry_id: W of them from entry_id mod E."""
    start = entry_id % ensemble_size
    return [(start + i) % ensemble_size for i in range(write_quorum_size)]
