"""Issue 31, item 7: a ledger's password digest is PBKDF2-HMAC-SHA256 with a random salt per ledger,
the salt and parameters inside the `password_digest` bytes (v1); digests written before (one fixed
global salt) are still verified; unknown formats are refused as such, not as a wrong password; a
check runs the key derivation once per (digest, password) per process; old clients' view of a v1
digest (they refuse the right password) is why docs/security.md orders the upgrade."""

from __future__ import annotations

import hashlib
import time

import pytest

from metadata import password_digest as pd
from metadata import serde
from metadata.ids import LedgerId
from metadata.ledger import LedgerMetadata
from metadata.quorum import QuorumConfig


def _meta(password: bytes, n: int = 1) -> LedgerMetadata:
    return LedgerMetadata.new(LedgerId(0, n), QuorumConfig(1, 1, 1), ["b0"], password=password)


def test_each_ledger_gets_its_own_salt_and_the_digest_describes_itself() -> None:
    a, b = pd.password_digest(b"same password"), pd.password_digest(b"same password")
    assert a != b  # no table computed once can serve two ledgers
    assert a.startswith(pd.V1_PREFIX) and pd.digest_format(a) == "pbkdf2-sha256"
    iterations, salt_len = pd._V1_HEADER.unpack_from(a, len(pd.V1_PREFIX))
    assert (iterations, salt_len) == (pd.ITERATIONS, pd.SALT_BYTES)
    salt = a[len(pd.V1_PREFIX) + pd._V1_HEADER.size:][:salt_len]
    assert a.endswith(hashlib.pbkdf2_hmac("sha256", b"same password", salt, iterations, dklen=32))  # the standard KDF
    assert pd.check_password(a, b"same password") and not pd.check_password(a, b"same passwore")


def test_the_digest_survives_serialization_in_the_existing_field() -> None:
    meta = _meta(b"secret")
    back = serde.decode(serde.encode(meta))
    assert back.password_digest == meta.password_digest and back.check_password(b"secret")
    assert not back.check_password(b"")
    assert serde.to_json_dict(back)["hasPassword"] is True
    assert serde.to_json_dict(_meta(b""))["hasPassword"] is False


def test_a_digest_written_before_the_change_is_still_verified() -> None:
    old = pd.legacy_password_digest(b"pw")
    assert old == hashlib.sha256(b"pyspark-ledger/password-check\x00pw").digest()  # what older clients wrote
    assert pd.digest_format(old) == "legacy-sha256"
    assert pd.check_password(old, b"pw") and not pd.check_password(old, b"pw2")
    assert pd.check_password(b"", b"anything")  # no digest: no check, as before


@pytest.mark.parametrize("damage", ["truncated", "unknown version", "too few iterations", "too many iterations",
                                    "short salt", "trailing byte"])
def test_a_digest_of_no_known_format_is_refused_as_such(damage: str) -> None:
    good = pd.password_digest(b"pw")
    header = len(pd.V1_PREFIX)
    bad = {
        "truncated": good[:-1],
        "unknown version": good.replace(b"$v1$", b"$v2$"),
        "too few iterations": pd.V1_PREFIX + pd._V1_HEADER.pack(10, 16) + good[header + 5:],
        "too many iterations": pd.V1_PREFIX + pd._V1_HEADER.pack(2**31, 16) + good[header + 5:],
        "short salt": pd.V1_PREFIX + pd._V1_HEADER.pack(pd.ITERATIONS, 4) + good[header + 5:][:4] + good[-32:],
        "trailing byte": good + b"\x00",
    }[damage]
    assert pd.digest_format(bad) == "unknown"
    with pytest.raises(pd.UnknownPasswordDigestError, match="no format this client knows"):
        pd.check_password(bad, b"pw")


def test_a_check_derives_the_key_once_per_digest_and_password() -> None:
    digest = pd.password_digest(b"cached")
    before = pd.derivations()
    for _ in range(50):
        assert pd.check_password(digest, b"cached")
        assert not pd.check_password(digest, b"wrong")
    assert pd.derivations() - before == 2  # the right and the wrong password, once each


def test_the_check_cache_is_bounded_and_keeps_no_password() -> None:
    cache = pd._CheckCache(3)
    for i in range(10):
        cache.put(cache.key(b"d%d" % i, b"password %d" % i), True)
    assert len(cache) == 3
    assert all(b"password" not in part for key in cache._results for part in key)


def test_an_older_client_refuses_the_right_password_on_a_new_digest() -> None:
    """Why docs/security.md says: upgrade every client before any upgraded client creates ledgers."""
    new = pd.password_digest(b"pw")
    older_clients_check = pd.legacy_password_digest(b"pw") == new
    assert not older_clients_check


def test_opening_400_ledgers_costs_well_under_a_second_of_key_derivation() -> None:
    """Each ledger has its own salt, so each of 400 opens derives once (printed; the bound is
    generous for a shared machine: the measured figure is about 0.25 s)."""
    digests = [pd.password_digest(b"") for _ in range(400)]
    start = time.perf_counter()
    assert all(pd.check_password(d, b"") for d in digests)
    elapsed = time.perf_counter() - start
    print(f"400 first checks: {elapsed:.3f} s")
    assert elapsed < 5.0
