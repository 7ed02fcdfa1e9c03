"""bookie/ledger_owner.py in-process, over a real embedded store: which first key a bookie takes
for a ledger it has not seen (issue 31, item 2). Every outcome: accepted (the verifier matches, or
the ledger has none), refused (not in metadata, wrong key, a verifier of unknown format), BUSY
when the store cannot answer; a miss is read again after a sync; checks are cached."""

from __future__ import annotations

from pathlib import Path

import pytest

from bookie.ledger_owner import LedgerOwners
from bookie.status import Status
from metadata import key_verifier
from metadata.errors import MetadataUnavailableError
from metadata.ids import LedgerId
from metadata.ledger import LedgerMetadata
from metadata.ledgers import LedgerManager
from metadata.quorum import QuorumConfig
from metadata.store import MetadataStore, Versioned
from metadata.uri import open_store
from pyspark_ledger.autorecovery.counting_store import CountingStore
from pyspark_ledger.protocol.digest import master_key

RIGHT = master_key(b"right")
WRONG = master_key(b"wrong")


class Flaky(CountingStore):
    """Reads fail while `down`; the first read of `miss_once` paths answers "no node"."""

    def __init__(self, inner: MetadataStore):
        super().__init__(inner, lambda: None)
        self.down = False
        self.miss_once: set[str] = set()
        self.gets = 0
        self.syncs = 0

    def get(self, path: str) -> Versioned | None:
        self.gets += 1
        if self.down:
            raise MetadataUnavailableError("metadata store unreachable")
        if path in self.miss_once:
            self.miss_once.discard(path)
            return None
        return self.inner.get(path)

    def sync(self, path: str) -> None:
        self.syncs += 1


def create(store: MetadataStore, n: int, verifier: bytes | None) -> tuple[int, int]:
    custom = {} if verifier is None else {key_verifier.KEY: verifier}
    meta = LedgerMetadata.new(LedgerId(0, n), QuorumConfig(1, 1, 1), ["b0"], custom=custom)
    LedgerManager(store).create(meta)
    return (0, n)


@pytest.fixture
def store(tmp_path: Path) -> Flaky:
    return Flaky(open_store(f"sqlite://{tmp_path / 'meta.db'}"))


def test_every_outcome(store: Flaky) -> None:
    owners = LedgerOwners(store)
    salted = create(store, 1, key_verifier.make_verifier(RIGHT))
    legacy_kind = create(store, 2, key_verifier.make_verifier(RIGHT, salted=False))
    none = create(store, 3, None)
    newer = create(store, 4, b"$kv-argon2$v9$something")

    assert owners.check(salted, RIGHT, "Add").status == Status.OK
    assert owners.check(legacy_kind, RIGHT, "Add").status == Status.OK
    wrong = owners.check(salted, WRONG, "WriteLac")
    assert wrong.status == Status.UNAUTHORIZED
    assert "WriteLac refused for ledger 0:1: wrong master key" in wrong.message and "verifier" in wrong.message
    assert owners.check(legacy_kind, WRONG, "Add").status == Status.UNAUTHORIZED
    assert owners.check(none, WRONG, "Fence").status == Status.OK  # no verifier: trust on first write
    unknown = owners.check(newer, RIGHT, "Add")
    assert unknown.status == Status.UNAUTHORIZED and "no format this release knows" in unknown.message
    absent = owners.check((0, 99), RIGHT, "Fence")
    assert absent.status == Status.UNAUTHORIZED and "no such ledger in metadata" in absent.message

    store.down = True
    busy = owners.check((0, 5), RIGHT, "Add")
    assert busy.status == Status.BUSY and "retry" in busy.message
    assert owners.check(salted, RIGHT, "Add").status == Status.OK  # its verifier is cached


def test_a_miss_is_read_again_after_a_sync_and_verifiers_are_cached(store: Flaky) -> None:
    owners = LedgerOwners(store)
    ledger = create(store, 7, key_verifier.make_verifier(RIGHT))
    store.miss_once.add("/ledgers/0000/0000/0000/0000/0000/0000/0000/0007")
    assert owners.check(ledger, RIGHT, "Add").status == Status.OK
    assert store.syncs == 1 and store.gets == 2
    for _ in range(5):
        assert owners.check(ledger, WRONG, "WriteLac").status == Status.UNAUTHORIZED
    assert store.gets == 2  # cached per ledger: no metadata read per refused call


def test_a_verifier_never_holds_the_key_and_a_damaged_one_never_matches() -> None:
    v = key_verifier.make_verifier(RIGHT)
    assert RIGHT not in v and key_verifier.key_matches(v, RIGHT) and not key_verifier.key_matches(v, WRONG)
    damaged = v[:-1] + bytes([v[-1] ^ 1])
    assert not key_verifier.key_matches(damaged, RIGHT)
    with pytest.raises(key_verifier.UnknownKeyVerifierError):
        key_verifier.key_matches(v[:-1], RIGHT)  # truncated: no known format, never "wrong key"
