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

    @classmethod
    def for_ledger(cls, digest_type: DigestType | str, password: bytes = b"") -> "Digest":
        t = DigestType.parse(digest_type)
        size = {DigestType.CRC32C: 4, DigestType.MAC: 32, DigestType.NONE: 0}[t]
        return cls(t, DIGEST_CODES[t], size, mac_key(password) if t is DigestType.MAC else b"")

    def compute(self, header: bytes, payload: bytes | memoryview) -> bytes:
        if self.type is DigestType.CRC32C:
            return crc32c.crc32c(payload, crc32c.crc32c(header)).to_bytes(4, "big")
        if self.type is DigestType.MAC:
            h = hmac.new(self.key, header, hashlib.sha256)
            h.update(payload)
            return h.digest()
        return b""
