"""The entry format's bulk decoder of runs (pyspark_ledger/protocol/entry_runs.py), against the client's own entry codec
(protocol/entry_format.py): the same verdicts, entry by entry, for both payload shapes."""

from __future__ import annotations

import random

import crc32c
import numpy as np
import pytest

from pyspark_ledger.protocol import entry_runs
from pyspark_ledger.protocol.digest import Digest
from pyspark_ledger.protocol.entry_format import HEADER_BYTES, decode_entry, encode_entry
from pyspark_ledger.protocol.entry_runs import DecodedRun

SEED = 20261121
SHAPES = [False, True]  # contiguous payloads (raw logs), zero-copy views (Arrow logs)
SHAPE_IDS = ["contiguous", "views"]


def payloads_of(run: DecodedRun) -> list[bytes]:
    return [b.to_pybytes() for b in run.buffers()]


def entries(digest: Digest, first: int, payloads: list[bytes], scope: int = 0, lid: int = 9) -> list[bytes]:
    out, length = [], 0
    for i, p in enumerate(payloads):
        length += len(p)
        out.append(encode_entry(digest, scope, lid, first + i, first + i - 1, length, p))
    return out


@pytest.mark.parametrize("views", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("digest_type", ["crc32c", "mac", "none"])
def test_decode_run_matches_decode_entry(digest_type: str, views: bool) -> None:
    rnd = random.Random(SEED)
    print(f"seed={SEED}")
    d = Digest.for_ledger(digest_type, b"pw")
    payloads = [rnd.randbytes(rnd.randrange(0, 300)) for _ in range(500)]
    stored = entries(d, 40, payloads, scope=2**63 + 5)
    run = entry_runs.decode_run(d, 2**63 + 5, 9, 40, stored, views=views)
    assert run.error is None and run.count == 500
    assert payloads_of(run) == [decode_entry(d, x, 2**63 + 5, 9, 40 + i).payload for i, x in enumerate(stored)]
    assert isinstance(run.payloads, list) == views


@pytest.mark.parametrize("views", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("damage", ["payload bit", "entry id", "ledger id", "truncated", "flags"])
def test_decode_run_stops_at_the_first_bad_entry(damage: str, views: bool) -> None:
    d = Digest.for_ledger("crc32c")
    stored = entries(d, 0, [bytes([i]) * 50 for i in range(100)])
    bad = bytearray(stored[37])
    if damage == "payload bit":
        bad[-1] ^= 0x01
    elif damage == "entry id":
        bad = bytearray(encode_entry(d, 0, 9, 38, 0, 0, bytes(50)))
    elif damage == "ledger id":
        bad = bytearray(encode_entry(d, 0, 8, 37, 0, 0, bytes(50)))
    elif damage == "truncated":
        bad = bad[:20]
    else:
        bad[0] ^= 0x40  # format version 2 -> 6, which no release writes (0x10 would make 3: a batch)
    stored[37] = bytes(bad)
    run = entry_runs.decode_run(d, 0, 9, 0, stored, views=views)
    assert run.count == 37 and run.error is not None and run.error.startswith("entry 37:")
    assert payloads_of(run) == [bytes([i]) * 50 for i in range(37)]


@pytest.mark.parametrize("digest_type", ["crc32c", "mac", "none"])
def test_large_entries_come_out_as_views_of_the_received_bytes(digest_type: str) -> None:
    """Arrow entries: every payload is a slice of the run's buffer (no copy), and a wrong
    password is named as such."""
    d = Digest.for_ledger(digest_type, b"pw")
    payloads = [bytes([i % 256]) * (i * 37) for i in range(60)]
    stored = entries(d, 5, payloads, scope=3, lid=2**64 - 1)
    data, lengths = blob_of(stored)
    run = entry_runs.decode_blob(d, 3, 2**64 - 1, 5, data, lengths, views=True)
    assert run.error is None
    assert payloads_of(run) == [decode_entry(d, x, 3, 2**64 - 1, 5 + i).payload for i, x in enumerate(stored)]
    base = np.frombuffer(data, dtype=np.uint8).ctypes.data
    assert all(base <= b.address < base + len(data) for b in run.buffers() if b.size)
    wrong = Digest.for_ledger(digest_type, b"other")
    if digest_type == "mac":
        assert entry_runs.decode_blob(wrong, 3, 2**64 - 1, 5, data, lengths, views=True).error == \
            "entry 5: digest mismatch (wrong password?)"


def test_the_header_layout_is_the_entry_formats() -> None:
    d = Digest.for_ledger("crc32c")
    stored = encode_entry(d, 7, 8, 9, 4, 100, b"x")
    rec = np.frombuffer(stored[:HEADER_BYTES], dtype=entry_runs.HEADER_DTYPE)[0]
    assert (int(rec["scope"]), int(rec["ledger"]), int(rec["entry"]), int(rec["lac"]), int(rec["length"])) == (7, 8, 9, 4, 100)
    assert entry_runs.fixed_prefix(d, 7, 8) == stored[:17]


# ---- runs as a bookie sends them: one buffer plus lengths ---------------------------------------------


def blob_of(stored: list[bytes]) -> tuple[bytes, np.ndarray]:
    return b"".join(stored), np.array([len(x) for x in stored], dtype=np.int64)


@pytest.mark.parametrize("views", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("digest_type", ["crc32c", "mac", "none"])
@pytest.mark.parametrize("sizes", ["equal", "mixed"])
def test_decode_blob_matches_decode_entry(digest_type: str, sizes: str, views: bool) -> None:
    rnd = random.Random(SEED)
    d = Digest.for_ledger(digest_type, b"pw")
    # 1,500 entries: enough for the one-pass crc check of equal sizes (bookie.crc_batch.PIECES_MIN)
    payloads = [rnd.randbytes(100 if sizes == "equal" else rnd.randrange(0, 300)) for _ in range(1_500)]
    stored = entries(d, 2**40, payloads, scope=2**64 - 1, lid=2**63)
    run = entry_runs.decode_blob(d, 2**64 - 1, 2**63, 2**40, *blob_of(stored), views=views)
    assert run.error is None and run.count == 1_500
    assert payloads_of(run) == [
        decode_entry(d, x, 2**64 - 1, 2**63, 2**40 + i).payload for i, x in enumerate(stored)]


@pytest.mark.parametrize("sizes", ["equal", "mixed"])
@pytest.mark.parametrize("damage, why", [
    ("payload bit", "digest mismatch"),
    ("digest byte", "digest mismatch"),
    ("lac byte", "digest mismatch"),  # a header byte outside the fixed prefix: only the crc sees it
    ("length byte", "digest mismatch"),
    ("entry id", "bytes belong to entry 1038 of ledger 00000000000000000000000000000009"),
    ("ledger id", "bytes belong to entry 1037 of ledger 00000000000000000000000000000019"),
    ("flags", "unsupported entry format or digest"),
])
@pytest.mark.parametrize("batched", [False, True], ids=["crc per entry", "crcs checked at once"])
@pytest.mark.parametrize("views", SHAPES, ids=SHAPE_IDS)
def test_a_bad_entry_in_the_middle_of_a_run_is_named(sizes: str, damage: str, why: str, batched: bool, views: bool,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    if batched:  # bookie.crc_batch's one-pass check (for equal sizes), which 100 entries are too few for
        monkeypatch.setattr(entry_runs, "PIECES_MIN", 1)
    d = Digest.for_ledger("crc32c")
    payloads = [bytes([i]) * (50 if sizes == "equal" else 20 + i) for i in range(100)]
    stored = entries(d, 1000, payloads)
    bad = bytearray(stored[37])
    at = {"payload bit": len(bad) - 1, "digest byte": HEADER_BYTES + 1, "lac byte": 30, "length byte": 40,
          "ledger id": 16, "flags": 0}.get(damage)
    if damage == "entry id":
        bad = bytearray(encode_entry(d, 0, 9, 1038, 0, 0, payloads[37]))
    else:
        bad[at] ^= 0x40 if damage == "flags" else 0x10  # flags: format 2 -> 6 (0x10 would make 3: a batch)
    stored[37] = bytes(bad)
    run = entry_runs.decode_blob(d, 0, 9, 1000, *blob_of(stored), views=views)
    assert run.count == 37 and run.error is not None
    assert run.error.startswith(f"entry 1037: {why}"), run.error
    assert payloads_of(run) == payloads[:37]


@pytest.mark.parametrize("lengths, why", [
    ([], "a run with no entries"),
    ([10, -10], "a run with a negative entry length"),
    ([45, 45], "a run's lengths add up to 90 bytes but it carries 91"),
])
def test_a_malformed_run_verifies_nothing_and_says_why(lengths: list[int], why: str) -> None:
    run = entry_runs.decode_blob(Digest.for_ledger("crc32c"), 0, 9, 0, bytes(91) if lengths else b"",
                            np.array(lengths, dtype=np.int64))
    assert run.count == 0 and run.error == why


def test_an_entry_shorter_than_a_header_ends_the_run() -> None:
    d = Digest.for_ledger("crc32c")
    stored = entries(d, 0, [b"x" * 10] * 5)
    stored[3] = stored[3][:30]
    run = entry_runs.decode_blob(d, 0, 9, 0, *blob_of(stored))
    assert run.count == 3 and run.error == "entry 3: 30 bytes is shorter than a header and digest"


@pytest.mark.parametrize("size", [1, 4, 41, 64])
def test_crc32c_rows_matches_crc32c(size: int) -> None:
    rnd = random.Random(SEED + size)
    rows = np.frombuffer(rnd.randbytes(300 * size), dtype=np.uint8).reshape(300, size)
    assert entry_runs.crc32c_rows(rows).tolist() == [crc32c.crc32c(r.tobytes()) for r in rows]
    prefix = rnd.randbytes(size // 2)
    rows = rows.copy()
    rows[:, : len(prefix)] = np.frombuffer(prefix, dtype=np.uint8)
    assert entry_runs.crc32c_rows(rows, prefix).tolist() == [crc32c.crc32c(r.tobytes()) for r in rows]
