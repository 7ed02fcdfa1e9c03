"""A verifier of a ledger's master key, kept in the ledger's metadata, so that a bookie can tell
the ledger's own writers from a stranger before it stores the key of a ledger it has not seen
(bookie/ledger_owner.py; issue 31, item 2).

Bookies see only the master key (derived by the client from the password, never the password);
metadata keeps only a digest of the password (metadata/password_digest.py): neither can check the
other, so the creating client also stores this, in the ledger's custom map under KEY (no new
metadata field: a client of release 0.1.0 rebuilds metadata through its dataclass and would drop
a field it does not know, while it carries the custom map over unchanged):

    b"$kv-pbkdf2-sha256$v1$" | iterations (u32, big-endian) | salt length (u8) | salt | 32-byte key

the PBKDF2-HMAC-SHA256 of the master key with a random salt per ledger. Never the key itself. A
guess of the password checked against the verifier costs one SHA-256 (the master key) plus
`iterations` HMACs: the creating client takes the iterations of the ledger's password digest
(ITERATIONS with salted digests, 1 with the legacy digest, which is one SHA-256 anyway), so the
verifier is never the cheaper way to guess a password from metadata.

Checks are cached per process (bounded): a bookie derives once per (verifier, key).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
import threading
from collections import OrderedDict

from metadata.errors import InvalidMetadataError
from metadata.password_digest import ITERATIONS

KEY = "ledger.master_key_verifier"  # the custom-map key
PREFIX = b"$kv-pbkdf2-sha256$v1$"
_HEADER = struct.Struct(">IB")  # iterations, salt length
ITERATIONS_MAX = 1_000_000  # a verifier asking for more is refused (one check must stay bounded)
SALT_BYTES = 16
SALT_BYTES_MIN, SALT_BYTES_MAX = 8, 64
KEY_BYTES = 32
CHECKS_CACHED_MAX = 4096


class UnknownKeyVerifierError(InvalidMetadataError):
    """A ledger's master-key verifier is in no format this code knows (a newer release's, or damaged)."""


def _ensure(condition: bool, what: str) -> None:
    """An invariant that survives python -O: a broken one is a bug, never handled."""
    if not condition:
        raise AssertionError(what)


def _derive(master_key: bytes, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac("sha256", master_key, salt, iterations, dklen=KEY_BYTES)


def make_verifier(master_key: bytes, *, salted: bool = True, salt: bytes | None = None) -> bytes:
    """A new ledger's verifier; `salted` follows its password digest (the module docstring)."""
    iterations = ITERATIONS if salted else 1
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    if not SALT_BYTES_MIN <= len(salt) <= SALT_BYTES_MAX:
        raise ValueError(f"a salt of {SALT_BYTES_MIN}..{SALT_BYTES_MAX} bytes expected")
    verifier = PREFIX + _HEADER.pack(iterations, len(salt)) + salt + _derive(master_key, salt, iterations)
    _ensure(_parse(verifier) is not None, "a new verifier parses")
    return verifier


def _parse(verifier: bytes) -> tuple[int, bytes, bytes] | None:
    """(iterations, salt, key) of a well-formed verifier, else None."""
    if not verifier.startswith(PREFIX) or len(verifier) < len(PREFIX) + _HEADER.size:
        return None
    iterations, salt_len = _HEADER.unpack_from(verifier, len(PREFIX))
    if not 1 <= iterations <= ITERATIONS_MAX or not SALT_BYTES_MIN <= salt_len <= SALT_BYTES_MAX:
        return None
    start = len(PREFIX) + _HEADER.size
    if len(verifier) != start + salt_len + KEY_BYTES:
        return None
    return iterations, verifier[start:start + salt_len], verifier[start + salt_len:]


class _Checks:
    """Bounded memo: (verifier, keyed hash of the key) -> matched; never holds a key."""

    def __init__(self, capacity: int):
        self._capacity = capacity
        self._results: OrderedDict[tuple[bytes, bytes], bool] = OrderedDict()
        self._lock = threading.Lock()
        self._secret = os.urandom(32)

    def check(self, verifier: bytes, master_key: bytes, parsed: tuple[int, bytes, bytes]) -> bool:
        memo = (verifier, hashlib.blake2b(master_key, key=self._secret, digest_size=32).digest())
        with self._lock:
            found = self._results.get(memo)
            if found is not None:
                self._results.move_to_end(memo)
                return found
        iterations, salt, expected = parsed
        matched = hmac.compare_digest(_derive(master_key, salt, iterations), expected)
        with self._lock:
            self._results[memo] = matched
            while len(self._results) > self._capacity:
                self._results.popitem(last=False)
        return matched


_CHECKS = _Checks(CHECKS_CACHED_MAX)


def key_matches(verifier: bytes, master_key: bytes) -> bool:
    """Whether `master_key` is the one `verifier` was made from. Raises UnknownKeyVerifierError
    for a verifier in no known format (never read as a wrong key)."""
    parsed = _parse(verifier)
    if parsed is None:
        raise UnknownKeyVerifierError(f"a master-key verifier in no format this release knows ({len(verifier)} "
                                      "bytes): written by a newer release, or damaged")
    return _CHECKS.check(verifier, master_key, parsed)
