"""Versions shared by bookie and client: the release, and the wire protocol's supported range.

The wire version numbers the protocol between a client and a bookie as a whole. The plain-TCP add
transport's hello carries it (bookie/proto/add_framing.py); a gRPC feature a later version adds
(a request field an older bookie would silently ignore) is used only with a bookie whose range
includes that version. Each side supports a range [WIRE_VERSION_MIN, WIRE_VERSION_MAX]; a bookie
advertises its range in its registration (metadata.registry.BookieInfo) and in Info, and a client
speaks the highest version both support (`negotiate`). A bookie of a release before ranges existed
(0.1.0) advertises none and speaks version 1 only (OLDEST_PEER_RANGE).

To add version N (docs/upgrading.md, "Wire versions"): raise WIRE_VERSION_MAX to N, and branch
where the new behaviour differs: on the bookie, on the version its add listener accepted for the
connection (bookie/add_listener.py); on the client, on SocketAddStream.wire_version or, for gRPC
calls, BookieClient.wire_version(). Keep every version down to WIRE_VERSION_MIN working, since
clients and bookies of the previous release talk to this one during a rolling upgrade. Raise
WIRE_VERSION_MIN only once no supported release speaks below it.
"""

from __future__ import annotations

from dataclasses import dataclass

from bookie.errors import BookieError

# This code's release (pyproject.toml's version; tests/upgrade/test_versions.py keeps them equal).
RELEASE = "0.2.0.dev0"

WIRE_VERSION_MIN = 1
WIRE_VERSION_MAX = 2
# The versions, by what each added (docs/add-transport.md):
# 1: the add transport's AddBatch of per-entry `entries`, one status per batch (release 0.1.0).
# 2: run-encoded add batches (AddBatch.run_lengths + run_body) and AddResult.stored_count, the
#    entries of a run stored before the entry it was refused from.
RUN_ADDS_VERSION = 2
# The add transport's hello carries a u32.
WIRE_VERSION_LIMIT = 2**32 - 1


class WireVersionError(BookieError, ValueError):
    """Two sides share no wire version, or a range is malformed."""


@dataclass(frozen=True, slots=True)
class WireRange:
    """The wire versions one side speaks, both ends included."""

    low: int
    high: int

    def __post_init__(self) -> None:
        if not 1 <= self.low <= self.high <= WIRE_VERSION_LIMIT:
            raise WireVersionError(f"wire version range {self.low}..{self.high} is not 1 <= low <= high <= {WIRE_VERSION_LIMIT}")

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.low <= version <= self.high

    def __str__(self) -> str:
        return str(self.low) if self.low == self.high else f"{self.low}..{self.high}"


OUR_RANGE = WireRange(WIRE_VERSION_MIN, WIRE_VERSION_MAX)
# What a peer that advertises no range speaks: release 0.1.0 knew version 1 only.
OLDEST_PEER_RANGE = WireRange(1, 1)


def negotiate(ours: WireRange, theirs: WireRange) -> int:
    """The highest version both ranges hold; WireVersionError naming both when they are disjoint."""
    version = min(ours.high, theirs.high)
    if version < max(ours.low, theirs.low):
        raise WireVersionError(f"no common wire version: this side speaks {ours}, the peer {theirs}")
    return version


def peer_range(low: int, high: int) -> WireRange:
    """A peer's advertised range; 0 for either bound (a registration or Info answer of a release
    that had no ranges: protobuf's and the registry's default) means OLDEST_PEER_RANGE."""
    if low == 0 or high == 0:
        return OLDEST_PEER_RANGE
    return WireRange(low, high)
