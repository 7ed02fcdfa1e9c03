"""The version numbers: the release (pyproject.toml, the code, RELEASES.toml) and the wire range
(bookie/proto/versions.py), pure and in-process."""

from __future__ import annotations

import json
import re
import tomllib

import pytest

import pyspark_ledger
from bookie.config import installed_version
from bookie.proto.versions import (
    OLDEST_PEER_RANGE,
    OUR_RANGE,
    RELEASE,
    WireRange,
    WireVersionError,
    negotiate,
    peer_range,
)
from metadata.registry import BookieInfo
from pyspark_ledger.testing.old_release import Release, ReleaseBuildError, read_releases, repository_root

ROOT = repository_root()


def release_numbers(version: str) -> tuple[int, ...]:
    """The numeric release part of a PEP 440 version ("0.2.0.dev0" -> (0, 2, 0))."""
    m = re.match(r"^(\d+(?:\.\d+)*)", version)
    assert m, f"not a version: {version!r}"
    return tuple(int(x) for x in m.group(1).split("."))


def test_the_checkout_is_newer_than_every_listed_release_and_says_so_everywhere() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert project == RELEASE == pyspark_ledger.__version__ == installed_version()
    releases = read_releases(ROOT)
    numbers = [release_numbers(r.version) for r in releases]
    assert numbers == sorted(set(numbers)), f"RELEASES.toml is not oldest first, each once: {releases}"
    assert release_numbers(RELEASE) > numbers[-1], f"pyproject.toml's {RELEASE} is not above the last release {releases[-1]}"


def test_a_release_names_a_full_commit() -> None:
    with pytest.raises(ReleaseBuildError, match="not a full 40-digit hash"):
        Release("0.1.0", "b196bdd")
    assert all(len(r.commit) == 40 for r in read_releases(ROOT))


@pytest.mark.parametrize(("ours", "theirs", "speaks"), [
    ((1, 1), (1, 1), 1),
    ((1, 3), (1, 1), 1),  # a newer client, an old bookie
    ((1, 1), (1, 3), 1),  # an old client, a newer bookie
    ((2, 5), (1, 4), 4),
    ((1, 2**32 - 1), (7, 9), 9),
])
def test_both_sides_speak_the_highest_version_they_share(ours: tuple[int, int], theirs: tuple[int, int], speaks: int) -> None:
    assert negotiate(WireRange(*ours), WireRange(*theirs)) == speaks == negotiate(WireRange(*theirs), WireRange(*ours))


def test_disjoint_or_malformed_ranges_are_refused_by_name() -> None:
    with pytest.raises(WireVersionError, match=r"no common wire version: this side speaks 2\.\.3, the peer 1"):
        negotiate(WireRange(2, 3), WireRange(1, 1))
    for low, high in ((0, 1), (3, 2), (1, 2**32)):
        with pytest.raises(WireVersionError, match=f"wire version range {low}..{high}"):
            WireRange(low, high)


def test_a_registration_without_a_range_is_a_bookie_that_speaks_version_1_only() -> None:
    old = json.dumps({"bookie_id": "b1", "address": "127.0.0.1:1", "add_address": "127.0.0.1:2", "read_only": False,
                      "version": "0.1.0", "metrics_address": "", "instance_id": "x", "registered_ms": 1}).encode()
    info = BookieInfo.from_bytes("b1", old)
    assert peer_range(info.wire_version_min, info.wire_version_max) == OLDEST_PEER_RANGE == WireRange(1, 1)
    new = BookieInfo("b2", "127.0.0.1:3", wire_version_min=OUR_RANGE.low, wire_version_max=OUR_RANGE.high)
    assert peer_range(new.wire_version_min, new.wire_version_max) == OUR_RANGE
    # A registration of a later release, with fields this one does not know, still reads.
    later = json.loads(new.to_bytes())
    later["a_field_of_a_later_release"] = "zone-a/rack-1"
    assert BookieInfo.from_bytes("b2", json.dumps(later).encode()) == new
