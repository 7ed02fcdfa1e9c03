"""What ledger metadata keeps of a ledger password, and how a password is checked against it.

Two formats share the `password_digest` bytes of the metadata (no new field: an older client
rebuilds metadata through its dataclass and would drop a field it does not know):

- v1, written since issue 31: PBKDF2-HMAC-SHA256 (hashlib, the standard library) with a random
  salt per ledger, the salt and the parameters inside the value:

      b"$pbkdf2-sha256$v1$" | iterations (u32, big-endian) | salt length (u8) | salt | 32-byte key

  A guess must be tried against each ledger on its own (no table computed once serves every
  ledger), at ITERATIONS HMACs per guess.
- legacy, written before: SHA-256 over a fixed global prefix and the password, exactly 32 bytes.
  Still verified, and still written while the cluster setting salted_password_digests is off
  (the default until every client is upgraded: docs/upgrading.md).

Any other value is refused as UnknownPasswordDigestError (written by a newer client, or damaged),
never taken as "wrong password". An empty value means the ledger has no password check.

A check costs one key derivation per (digest, password) per process: results are cached (bounded,
CHECKS_CACHED_MAX, least recently used out), keyed by the digest and a keyed hash of the
password, so the cache never holds a password. ITERATIONS is chosen so that opening 400 ledgers,
each with its own salt, costs well under 1 s of key derivation on a small machine (about 0.6 ms
per ledger measured on the 2-core test machine; docs/security.md).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
import threading
from collections import OrderedDict

from metadata.errors import InvalidMetadataError

V1_PREFIX = b"$pbkdf2-sha256$v1$"
_V1_HEADER = struct.Struct(">IB")  # iterations, salt length
ITERATIONS = 2000
ITERATIONS_MIN = 1000  # a digest asking for fewer is refused (a weakened value planted in metadata)
ITERATIONS_MAX = 1_000_000  # ... or for more (one check must stay bounded in time)
SALT_BYTES = 16
SALT_BYTES_MIN, SALT_BYTES_MAX = 8, 64
KEY_BYTES = 32
LEGACY_BYTES = 32
_LEGACY_PREFIX = b"pyspark-ledger/password-check\x00"
CHECKS_CACHED_MAX = 4096


class UnknownPasswordDigestError(InvalidMetadataError):
    """A ledger's password digest is in no format this client knows (a newer client's, or damaged)."""


def _ensure(condition: bool, what: str) -> None:
    """An invariant that survives python -O (STYLE.md): a broken one is a bug, never handled."""
    if not condition:
        raise AssertionError(what)


def _pbkdf2(password: bytes, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac("sha256", password, salt, iterations, dklen=KEY_BYTES)


def password_digest(password: bytes, *, salt: bytes | None = None, iterations: int = ITERATIONS) -> bytes:
    """A new ledger's digest (v1), with a fresh random salt unless one is given (tests)."""
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    if not SALT_BYTES_MIN <= len(salt) <= SALT_BYTES_MAX or not ITERATIONS_MIN <= iterations <= ITERATIONS_MAX:
        raise ValueError(f"salt of {SALT_BYTES_MIN}..{SALT_BYTES_MAX} bytes and {ITERATIONS_MIN}..{ITERATIONS_MAX} "
                         "iterations expected")
    digest = V1_PREFIX + _V1_HEADER.pack(iterations, len(salt)) + salt + _pbkdf2(password, salt, iterations)
    _ensure(_parse_v1(digest) == (iterations, salt, digest[-KEY_BYTES:]), "a new digest parses as v1")
    return digest


def legacy_password_digest(password: bytes) -> bytes:
    """The digest release 0.1.0 writes and checks: new ledgers keep it while the cluster setting
    salted_password_digests is off (the default), so clients of that release can open them."""
    return hashlib.sha256(_LEGACY_PREFIX + password).digest()


def _parse_v1(digest: bytes) -> tuple[int, bytes, bytes] | None:
    """(iterations, salt, key) of a well-formed v1 digest, else None."""
    if not digest.startswith(V1_PREFIX):
        return None
    header_end = len(V1_PREFIX) + _V1_HEADER.size
    if len(digest) < header_end:
        return None
    iterations, salt_len = _V1_HEADER.unpack_from(digest, len(V1_PREFIX))
    if not ITERATIONS_MIN <= iterations <= ITERATIONS_MAX or not SALT_BYTES_MIN <= salt_len <= SALT_BYTES_MAX:
        return None
    if len(digest) != header_end + salt_len + KEY_BYTES:
        return None
    return iterations, digest[header_end:header_end + salt_len], digest[header_end + salt_len:]


def digest_format(digest: bytes) -> str:
    """"none" (no password check), "pbkdf2-sha256" (v1), "legacy-sha256", or "unknown"."""
    if not digest:
        return "none"
    if _parse_v1(digest) is not None:
        return "pbkdf2-sha256"
    return "legacy-sha256" if len(digest) == LEGACY_BYTES else "unknown"


class _CheckCache:
    """Bounded memo of check results: (digest, keyed hash of the password) -> matched."""

    def __init__(self, capacity: int):
        self._capacity = capacity
        self._results: OrderedDict[tuple[bytes, bytes], bool] = OrderedDict()
        self._lock = threading.Lock()
        self._key = os.urandom(32)  # per process: the cache's keys say nothing of the password elsewhere

    def key(self, digest: bytes, password: bytes) -> tuple[bytes, bytes]:
        return digest, hashlib.blake2b(password, key=self._key, digest_size=32).digest()

    def get(self, key: tuple[bytes, bytes]) -> bool | None:
        with self._lock:
            found = self._results.get(key)
            if found is not None:
                self._results.move_to_end(key)
            return found

    def put(self, key: tuple[bytes, bytes], matched: bool) -> None:
        with self._lock:
            self._results[key] = matched
            self._results.move_to_end(key)
            while len(self._results) > self._capacity:
                self._results.popitem(last=False)
            _ensure(len(self._results) <= self._capacity, "the check cache stays within its bound")

    def __len__(self) -> int:
        with self._lock:
            return len(self._results)


_CACHE = _CheckCache(CHECKS_CACHED_MAX)
_DERIVATIONS = [0]  # key derivations this process ran (tests: the cache works)


def derivations() -> int:
    return _DERIVATIONS[0]


def check_password(digest: bytes, password: bytes) -> bool:
    """Whether `password` is the one `digest` was made from (True for an empty digest: no check).
    Raises UnknownPasswordDigestError for a digest in no known format."""
    kind = digest_format(digest)
    if kind == "none":
        return True
    if kind == "legacy-sha256":
        return hmac.compare_digest(legacy_password_digest(password), digest)
    parsed = _parse_v1(digest)
    if parsed is None:
        raise UnknownPasswordDigestError(
            f"the ledger's password digest is in no format this client knows ({len(digest)} bytes); it was "
            "written by a newer client or is damaged: upgrade this client (docs/security.md)")
    key = _CACHE.key(digest, password)
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    iterations, salt, expected = parsed
    _DERIVATIONS[0] += 1
    matched = hmac.compare_digest(_pbkdf2(password, salt, iterations), expected)
    _CACHE.put(key, matched)
    return matched
