"""Entry digests and the keys derived from a ledger password.

- "crc32c": CRC32C (4 bytes) over header and payload; catches corruption, not forgery.
- "mac": HMAC-SHA256 (32 bytes) keyed by a key derived from the password; a wrong password
  fails every entry with a digest mismatch.
- "none": no digest (tests and trusted pipelines only).

Two keys come from the password and neither is the password: the *master key* is sent to bookies
to authorise adds and fences; the *MAC key* never leaves the client, so a bookie that knows the
master key still cannot forge entries. (BookKeeper derives them the same way with SHA-1.)
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

import crc32c

from metadata.ledger import DigestType  # the module, not the package that re-exports the stores too

# BookKeeper's DigestType numbering, kept for the entry flags byte (bits 0-3).
DIGEST_CODES = {DigestType.MAC: 0, DigestType.CRC32C: 2, DigestType.NONE: 3}
DIGEST_BY_CODE = {v: k for k, v in DIGEST_CODES.items()}


def master_key(password: bytes) -> bytes:
    return hashlib.sha256(b"ledger" + password).digest()


def mac_key(password: bytes) -> bytes:
    return hashlib.sha256(b"mac" + password).digest()


@dataclass(frozen=True)
class Digest:
    type: DigestType
    code: int
    size: int
    key: bytes = b""
    # False only for an operator's view of a "mac" ledger (LedgerKeys.for_operator): the MAC key
    # comes from the password alone, so such a reader keeps each entry's stored digest instead.
    verifiable: bool = True

    @classmethod
    def for_ledger(cls, digest_type: DigestType | str, password: bytes = b"") -> Digest:
        t = DigestType.parse(digest_type)
        size = {DigestType.CRC32C: 4, DigestType.MAC: 32, DigestType.NONE: 0}[t]
        return cls(t, DIGEST_CODES[t], size, mac_key(password) if t is DigestType.MAC else b"")

    def compute(self, header: bytes, payload: bytes | memoryview) -> bytes:
        if self.type is DigestType.CRC32C:
            return crc32c.crc32c(payload, crc32c.crc32c(header)).to_bytes(4, "big")
        if self.type is DigestType.MAC:
            if not self.verifiable:  # a MAC under a made-up key would be a forged-looking entry
                raise ValueError("a mac digest cannot be computed without the ledger's password")
            h = hmac.new(self.key, header, hashlib.sha256)
            h.update(payload)
            return h.digest()
        return b""


@dataclass(frozen=True)
class LedgerKeys:
    """What a handle needs of a ledger's secret: the master key bookies check for adds, fences and
    (on bookies that ask) reads, and the digest entries are checked and made with.

    From the password (clients), or for an operator (autorecovery, the admin shell) from the master
    key a bookie keeps (pyspark_ledger/ledger/keys.py): then "crc32c" and "none" entries are checked
    as usual, and "mac" entries are checked for format and identity only and copied with the
    digest they were stored with (entry_format.encode_copy); the ledger's readers check the MAC."""

    master_key: bytes
    digest: Digest

    @classmethod
    def from_password(cls, digest_type: DigestType | str, password: bytes) -> LedgerKeys:
        return cls(master_key(password), Digest.for_ledger(digest_type, password))

    @classmethod
    def for_operator(cls, digest_type: DigestType | str, ledger_master_key: bytes) -> LedgerKeys:
        digest = Digest.for_ledger(digest_type)
        if digest.type is DigestType.MAC:
            digest = Digest(digest.type, digest.code, digest.size, b"", verifiable=False)
        return cls(ledger_master_key, digest)

    def __repr__(self) -> str:  # never the key
        return f"LedgerKeys(digest={self.digest.type.value}, verifiable={self.digest.verifiable})"
