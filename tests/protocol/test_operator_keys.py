"""An operator's view of a ledger's keys (protocol/digest.py LedgerKeys.for_operator): "mac"
entries cannot be checked or made without the password, so they are copied with the digest
they were stored with, and the owner's check still passes on the copy."""

from __future__ import annotations

import pytest

from pyspark_ledger.errors import DigestMismatchError, EntryFormatError
from pyspark_ledger.protocol.digest import Digest, LedgerKeys, master_key
from pyspark_ledger.protocol.entry_format import decode_entry, encode_copy, encode_entry

PASSWORD = b"owner password"


@pytest.mark.parametrize("digest_type", ["mac", "crc32c", "none"])
def test_an_operator_copy_is_byte_for_byte_the_stored_entry(digest_type: str) -> None:
    owner = LedgerKeys.from_password(digest_type, PASSWORD)
    stored = encode_entry(owner.digest, 1, 7, 3, 2, 900, b"payload bytes")
    operator = LedgerKeys.for_operator(digest_type, master_key(PASSWORD))
    entry = decode_entry(operator.digest, stored, 1, 7, 3)
    copy = encode_copy(operator.digest, 1, 7, entry)
    assert copy == stored
    assert decode_entry(owner.digest, copy, 1, 7, 3).payload == b"payload bytes"  # the owner's MAC check passes


def test_an_operator_still_catches_crc_damage_and_foreign_entries() -> None:
    owner = LedgerKeys.from_password("crc32c", PASSWORD)
    operator = LedgerKeys.for_operator("crc32c", master_key(PASSWORD))
    stored = bytearray(encode_entry(owner.digest, 1, 7, 3, 2, 900, b"payload bytes"))
    stored[-1] ^= 1
    with pytest.raises(DigestMismatchError):
        decode_entry(operator.digest, bytes(stored), 1, 7, 3)
    mac_op = LedgerKeys.for_operator("mac", master_key(PASSWORD))
    other = encode_entry(LedgerKeys.from_password("mac", PASSWORD).digest, 1, 8, 3, 2, 900, b"x")
    with pytest.raises(EntryFormatError, match="belong to entry 3 of ledger"):
        decode_entry(mac_op.digest, other, 1, 7, 3)  # another ledger's bytes are refused without the MAC


def test_an_operator_never_makes_a_mac_of_its_own() -> None:
    digest = LedgerKeys.for_operator("mac", master_key(PASSWORD)).digest
    assert not digest.verifiable
    with pytest.raises(ValueError, match="without the ledger's password"):
        digest.compute(b"h" * 41, b"p")
    assert Digest.for_ledger("mac", PASSWORD).verifiable
    assert "owner" not in repr(LedgerKeys.from_password("mac", PASSWORD))
