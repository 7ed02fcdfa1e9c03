"""The entry format: shipped test vectors, every digest type, and every way bytes can go wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyspark_ledger.errors import DigestMismatchError, EntryFormatError
from pyspark_ledger.protocol.digest import Digest, mac_key, master_key
from pyspark_ledger.protocol.entry_format import HEADER_BYTES, decode_entry, encode_entry, entry_encoder, run_encoder

VECTORS = json.loads((Path(__file__).resolve().parents[1] / "vectors" / "entry_format_v2.json").read_text())["cases"]


@pytest.mark.parametrize("case", VECTORS, ids=lambda c: f"{c['digest_type']}-{c['entry_id']}")
def test_vectors(case: dict) -> None:
    d = Digest.for_ledger(case["digest_type"], bytes.fromhex(case["password_hex"]))
    payload = bytes.fromhex(case["payload_hex"])
    encoded = encode_entry(d, case["scope_id"], case["ledger_id"], case["entry_id"], case["lac"], case["length"], payload)
    assert encoded.hex() == case["encoded_hex"]
    # The writer's per-ledger encoder makes the very same bytes.
    encode = entry_encoder(d, case["scope_id"], case["ledger_id"])
    assert encode(case["entry_id"], case["lac"], case["length"], payload) == encoded
    # So does the run encoder (add_entries_async), for a run of one ...
    encode_run = run_encoder(d, case["scope_id"], case["ledger_id"])
    length_before = case["length"] - len(payload)
    assert encode_run(case["entry_id"], case["lac"], length_before, [payload]) == ([encoded], case["length"])
    e = decode_entry(d, encoded, case["scope_id"], case["ledger_id"], case["entry_id"])
    assert (e.payload, e.last_add_confirmed, e.length) == (payload, case["lac"], case["length"])
    assert len(encoded) == HEADER_BYTES + d.size + len(payload)


@pytest.mark.parametrize("digest_type", ["crc32c", "mac", "none"])
@pytest.mark.parametrize("version", [2, 3])
def test_a_run_encodes_as_its_entries_one_by_one(digest_type: str, version: int) -> None:
    """... and for a longer run: each entry its own header (its id, the running length) and digest."""
    d = Digest.for_ledger(digest_type, b"pw")
    payloads = [bytes([i]) * i for i in range(40)]  # the empty payload included
    encoded, length = run_encoder(d, 3, 9, version)(100, 97, 5000, payloads)
    expected, running = [], 5000
    for i, p in enumerate(payloads):
        running += len(p)
        expected.append(encode_entry(d, 3, 9, 100 + i, 97, running, p, version))
    assert encoded == expected and length == running


def test_flags_byte_and_layout() -> None:
    d = Digest.for_ledger("crc32c")
    data = encode_entry(d, 1, 2, 3, 2, 10, b"x")
    assert data[0] == 0xA2
    assert data[1:9] == (1).to_bytes(8, "big") and data[9:17] == (2).to_bytes(8, "big")
    assert data[17:25] == (3).to_bytes(8, "big") and data[25:33] == (2).to_bytes(8, "big")
    assert data[33:41] == (10).to_bytes(8, "big") and data[45:] == b"x"
    assert encode_entry(Digest.for_ledger("mac", b"p"), 1, 2, 3, 2, 10, b"x")[0] == 0xA0


@pytest.mark.parametrize("dtype", ["crc32c", "mac"])
def test_every_flipped_byte_is_caught(dtype: str) -> None:
    d = Digest.for_ledger(dtype, b"pw")
    data = encode_entry(d, 5, 6, 7, 6, 100, b"payload bytes")
    for i in range(len(data)):
        bad = bytearray(data)
        bad[i] ^= 0x01
        with pytest.raises((DigestMismatchError, EntryFormatError)):
            decode_entry(d, bytes(bad), 5, 6, 7)


def test_wrong_password_wrong_ledger_wrong_entry_truncated() -> None:
    data = encode_entry(Digest.for_ledger("mac", b"right"), 0, 1, 0, -1, 3, b"abc")
    with pytest.raises(DigestMismatchError, match="wrong password"):
        decode_entry(Digest.for_ledger("mac", b"wrong"), data, 0, 1, 0)
    with pytest.raises(EntryFormatError, match="belong to entry 0"):
        decode_entry(Digest.for_ledger("mac", b"right"), data, 0, 1, 1)
    with pytest.raises(EntryFormatError, match="digest mac, the ledger uses crc32c"):
        decode_entry(Digest.for_ledger("crc32c"), data, 0, 1, 0)
    with pytest.raises(EntryFormatError, match="shorter"):
        decode_entry(Digest.for_ledger("mac", b"right"), data[:20], 0, 1, 0)


def test_keys_are_not_the_password_and_differ() -> None:
    assert master_key(b"pw") != mac_key(b"pw")
    assert b"pw" not in master_key(b"pw")
