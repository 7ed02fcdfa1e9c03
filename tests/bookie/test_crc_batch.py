"""bookie.crc_batch: the crc of pieces end to end, from the pieces' own crcs."""

from __future__ import annotations

import random

import numpy as np
import pytest
from crc32c import crc32c

from bookie import crc_batch

SEED = 20261123


def pieces(rnd: random.Random, n: int, length: int) -> tuple[bytes, np.ndarray]:
    data = rnd.randbytes(n * length)
    crcs = np.array([crc32c(data[i * length:(i + 1) * length]) for i in range(n)], dtype=np.uint32)
    return data, crcs


@pytest.mark.parametrize("length", [1, 3, 100, 145, 4096])
@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 64, 1001])
def test_combined_crc_is_the_crc_of_the_whole(length: int, n: int) -> None:
    data, crcs = pieces(random.Random(SEED + n * length), n, length)
    assert crc_batch.combined_crc(crcs, length) == crc32c(data)
    assert crc_batch.all_match(data, crcs, length)


def test_any_single_bit_flip_is_caught() -> None:
    rnd = random.Random(SEED)
    data, crcs = pieces(rnd, 300, 57)
    for _ in range(500):
        bad = bytearray(data)
        bad[rnd.randrange(len(bad))] ^= 1 << rnd.randrange(8)
        assert not crc_batch.all_match(bytes(bad), crcs, 57)


def test_a_wrong_stored_crc_or_a_wrong_size_is_caught() -> None:
    data, crcs = pieces(random.Random(SEED), 50, 20)
    wrong = crcs.copy()
    wrong[49] ^= 0x80000000
    assert not crc_batch.all_match(data, wrong, 20)
    assert not crc_batch.all_match(data + b"x", crcs, 20)
    assert not crc_batch.all_match(data[:-20], crcs, 20)


def test_shift_is_the_crc_of_a_prefix_moved_past_a_suffix() -> None:
    rnd = random.Random(SEED)
    for _ in range(20):
        a, b = rnd.randbytes(rnd.randrange(1, 90)), rnd.randbytes(rnd.randrange(1, 300))
        moved = crc_batch.shift(np.array([crc32c(a)], dtype=np.uint32), len(b))
        assert int(moved[0]) == crc32c(a + b) ^ crc32c(b)


def test_extend_is_the_crc_of_the_concatenation_for_any_lengths() -> None:
    rng = random.Random(20261128)
    lengths = [0, 1, 2, 3, 4, 255, 256, 4095, 4096, 65_537, 2**20 + 1, 5 * 2**20]
    for length_b in lengths + [rng.randrange(3 * 2**20) for _ in range(40)]:
        a = rng.randbytes(rng.randrange(300))
        b = rng.randbytes(length_b)
        assert crc_batch.extend(crc32c(a), crc32c(b), len(b)) == crc32c(a + b), (len(a), length_b)
    with pytest.raises(ValueError, match="out of range"):
        crc_batch.extend(0, 0, -1)
